"""shop/tax_rates.py and `manage.py load_tax_rates`: a CSV of rates loaded whole or
not at all, keyed by (tax class, country, valid_from), so that loading it again
changes nothing; the shipped EU and UK table loads."""

from datetime import date
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from shop.models import TaxClass, TaxRate
from shop.tax_rates import LoadResult, TaxRateFileInvalid, load_tax_rates, parse_tax_rates

pytestmark = pytest.mark.django_db

SHIPPED = Path(__file__).resolve().parents[2] / "shop" / "data" / "tax_rates_eu.csv"
GOOD = """country,tax_class,rate,valid_from,source
GB,standard,2000,2026-01-01,HMRC
gb,reduced,500,2026-01-01,HMRC
DE,standard,1900,2026-01-01,EC
"""


def write_csv(tmp_path, text, name="rates.csv"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def load(path) -> str:
    out = StringIO()
    call_command("load_tax_rates", path, stdout=out)
    return out.getvalue()


def rates():
    return {
        (r.country, r.tax_class_id, r.valid_from.isoformat()): (r.rate, r.source)
        for r in TaxRate.objects.order_by("pk")
    }


def test_load_tax_rates_good_file_creates_them(tmp_path):
    out = load(write_csv(tmp_path, GOOD))
    assert rates() == {
        ("GB", "standard", "2026-01-01"): (2000, "HMRC"),
        ("GB", "reduced", "2026-01-01"): (500, "HMRC"),  # the country upper-cased
        ("DE", "standard", "2026-01-01"): (1900, "EC"),
    }
    assert "3 rates: 3 created, 0 updated, 0 unchanged" in out


def test_load_tax_rates_again_is_idempotent_and_updates_only_what_changed(tmp_path):
    load(write_csv(tmp_path, GOOD))
    ids = set(TaxRate.objects.values_list("pk", flat=True))
    assert "0 created, 0 updated, 3 unchanged" in load(write_csv(tmp_path, GOOD))
    changed = GOOD.replace("DE,standard,1900", "DE,standard,2000") + "DE,standard,1600,2020-07-01,EC\n"
    assert "1 created, 1 updated, 2 unchanged" in load(write_csv(tmp_path, changed))
    assert TaxRate.objects.filter(pk__in=ids).count() == 3 and TaxRate.objects.count() == 4  # no duplicates
    assert rates()[("DE", "standard", "2026-01-01")] == (2000, "EC")
    assert rates()[("DE", "standard", "2020-07-01")] == (1600, "EC")


def test_load_tax_rates_without_a_source_column_keeps_the_stored_source(tmp_path):
    load(write_csv(tmp_path, GOOD))
    out = load(write_csv(tmp_path, "valid_from,rate,country,tax_class\n2026-01-01,2000,GB,standard\n"))  # any order
    assert "0 created, 0 updated, 1 unchanged" in out
    assert rates()[("GB", "standard", "2026-01-01")] == (2000, "HMRC")


def test_load_tax_rates_unknown_tax_class_refuses_the_file_naming_the_line(tmp_path, capsys):
    text = GOOD + "FR,luxury,3300,2026-01-01,EC\n"
    with pytest.raises(CommandError, match="1 invalid row.*nothing was written"):
        load(write_csv(tmp_path, text))
    err = capsys.readouterr().err
    assert "line 5: tax_class 'luxury' does not exist (there are: reduced, standard, zero)" in err
    assert not TaxRate.objects.exists()  # the good lines neither
    assert not TaxClass.objects.filter(code="luxury").exists()  # and no class was made up


def test_load_tax_rates_bad_rows_are_all_reported_and_nothing_is_written(tmp_path, capsys):
    bad = """country,tax_class,rate,valid_from
GB,standard,2000,2026-01-01
XX,standard,2000,2026-01-01
GBR,standard,2000,2026-01-01
GB,reduced,20.0,2026-01-01
GB,zero,10001,2026-01-01
GB,zero,-1,2026-01-01
DE,standard,1900,01/01/2026
DE,reduced,700,2026-02-30
GB,standard,1750,2026-01-01
DE,zero,0
"""
    with pytest.raises(CommandError, match="9 invalid row"):
        load(write_csv(tmp_path, bad))
    errors = capsys.readouterr().err.splitlines()
    assert [error.split(":")[0] for error in errors] == [f"line {n}" for n in range(3, 12)]
    assert "'XX' is not an ISO 3166-1 alpha-2 code" in errors[0]
    assert "'GBR' is not an ISO 3166-1 alpha-2 code" in errors[1]
    assert "rate '20.0' must be whole basis points, 0 to 10000 (2000 is 20%" in errors[2]
    assert "rate '10001'" in errors[3] and "rate '-1'" in errors[4]
    assert "valid_from '01/01/2026' must be a date, YYYY-MM-DD" in errors[5]
    assert "valid_from '2026-02-30'" in errors[6]
    assert "GB standard from 2026-01-01 already on line 2" in errors[7]
    assert "expected 4 columns, got 3" in errors[8]
    assert not TaxRate.objects.exists()


@pytest.mark.parametrize(
    "header",
    [
        "country,tax_class,rate",
        "country,tax_class,rate,valid_from,note",
        "country,country,tax_class,rate,valid_from",
        "",
    ],
)
def test_load_tax_rates_wrong_header(tmp_path, capsys, header):
    with pytest.raises(CommandError, match="nothing was written"):
        load(write_csv(tmp_path, f"{header}\nGB,standard,2000,2026-01-01\n"))
    assert "line 1: the header must be country,tax_class,rate,valid_from, optionally source" in capsys.readouterr().err


def test_load_tax_rates_missing_file():
    with pytest.raises(CommandError, match="no such file"):
        load("/nonexistent.csv")


def test_load_tax_rates_service_returns_the_counts():
    rows = parse_tax_rates(["country,tax_class,rate,valid_from\n", "IE,reduced,1350,2026-01-01\n"])
    assert rows[0].rate == 1350 and rows[0].valid_from == date(2026, 1, 1) and rows[0].source is None
    assert load_tax_rates(rows=rows) == LoadResult(created=1, updated=0, unchanged=0)
    assert load_tax_rates(rows=rows) == LoadResult(created=0, updated=0, unchanged=1)
    with pytest.raises(TaxRateFileInvalid):
        parse_tax_rates(["country,tax_class,rate,valid_from\n", "IE,reduced,13.5,2026-01-01\n"])


def test_load_tax_rates_moves_the_cache_generation_only_when_something_changed(
    tmp_path, redis, django_capture_on_commit_callbacks
):
    def generation():
        return int(redis.get("shop:cache-generation") or 0)

    path = write_csv(tmp_path, GOOD)
    before = generation()
    with django_capture_on_commit_callbacks(execute=True):
        load(path)
    assert generation() > before
    before = generation()
    with django_capture_on_commit_callbacks(execute=True):
        load(path)  # nothing changed: the caches stay
    assert generation() == before


# --- the shipped table (shop/data/tax_rates_eu.csv) -----------------------------------------------

EU_27 = set("AT BE BG HR CY CZ DK EE FI FR DE GR HU IE IT LV LT LU MT NL PL PT RO SK SI ES SE".split())


def test_shipped_eu_table_loads_whole():
    out = load(str(SHIPPED))
    # GB and the EU-27, each standard, reduced and zero; Denmark has no reduced rate.
    assert TaxRate.objects.count() == 28 * 3 - 1 == 83
    assert "83 rates: 83 created, 0 updated, 0 unchanged" in out
    assert set(TaxRate.objects.values_list("country", flat=True)) == EU_27 | {"GB"}
    assert set(TaxRate.objects.values_list("valid_from", flat=True)) == {date(2026, 1, 1)}
    assert not TaxRate.objects.filter(source="").exists()
    standard = dict(TaxRate.objects.filter(tax_class="standard").values_list("country", "rate"))
    reduced = dict(TaxRate.objects.filter(tax_class="reduced").values_list("country", "rate"))
    assert (standard["GB"], reduced["GB"]) == (2000, 500)
    assert (standard["DE"], reduced["DE"]) == (1900, 700)
    assert (standard["FR"], reduced["FR"]) == (2000, 550)
    assert (standard["FI"], reduced["FI"]) == (2550, 1350)
    assert (standard["HU"], standard["LU"]) == (2700, 1700)  # the highest and the lowest
    assert "DK" not in reduced
    assert set(TaxRate.objects.filter(tax_class="zero").values_list("rate", flat=True)) == {0}
    assert all(reduced[country] < standard[country] for country in reduced)
    assert "0 created, 0 updated, 83 unchanged" in load(str(SHIPPED))
