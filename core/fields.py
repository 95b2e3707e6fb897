from rest_framework import serializers


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer and nothing else: "3", 3.0, 2.5 and true are all refused."""

    default_error_messages = {"invalid": "A JSON integer is required."}

    def to_internal_value(self, data):
        if type(data) is not int:
            self.fail("invalid")
        return super().to_internal_value(data)
