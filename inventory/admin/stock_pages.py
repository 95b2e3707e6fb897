"""The stock admin's own pages: the audit (ledger against stock) and the
catalog import from a CSV file."""

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from inventory.admin.forms import CatalogUploadForm
from inventory.catalog_import import CatalogFileInvalid, import_catalog, parse_catalog
from inventory.services import stock_audit


class StockPages:
    """For the Stock ModelAdmin: the pages' URLs, views and the audit action."""

    @admin.action(description="Audit selected SKUs (ledger vs stock)", permissions=["view"])
    def audit_selected(self, request, queryset):
        return self._audit_response(request, list(queryset.values_list("product_id", flat=True)))

    def get_urls(self):
        return [
            path("audit/", self.admin_site.admin_view(self.audit_view), name="inventory_stock_audit"),
            path("import/", self.admin_site.admin_view(self.import_view), name="inventory_stock_import"),
            *super().get_urls(),
        ]

    def audit_view(self, request):
        if not self.has_view_permission(request):
            raise PermissionDenied
        return self._audit_response(request, None)

    def _audit_response(self, request, skus):
        rows = stock_audit(skus=skus)
        return TemplateResponse(
            request,
            "admin/inventory/stock/audit.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.model._meta,
                "title": "Stock audit",
                "rows": rows,
                "differences": sum(1 for row in rows if row["difference"]),
            },
        )

    def import_view(self, request):
        if not self.has_change_permission(request):
            raise PermissionDenied
        form = CatalogUploadForm(request.POST or None, request.FILES or None)
        errors = []
        if form.is_valid():
            text = form.cleaned_data["file"].read().decode("utf-8-sig", errors="replace")
            try:
                rows = parse_catalog(text.splitlines())
            except CatalogFileInvalid as invalid:
                errors = invalid.errors
            else:
                result = import_catalog(rows=rows, user=request.user)
                self.message_user(
                    request,
                    f"{len(rows)} rows: {result.created} products created, {result.updated} updated, "
                    f"{result.stock_movements} stock movements.",
                    messages.SUCCESS,
                )
                return self._redirect_to_changelist()
        return TemplateResponse(
            request,
            "admin/inventory/stock/import.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.model._meta,
                "title": "Import catalog and stock (CSV)",
                "form": form,
                "errors": errors,
            },
        )

    def _redirect_to_changelist(self):
        return HttpResponseRedirect(reverse("admin:inventory_stock_changelist"))
