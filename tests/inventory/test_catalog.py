"""inventory/catalog_import.py and `manage.py load_catalog`: a CSV catalog imported whole or not
at all, its stock moved through the ledger by the difference."""

import pytest
from django.core.management import CommandError, call_command

from inventory.models import Stock, StockMovement
from inventory.services import stock_audit
from shop.models import Product

pytestmark = pytest.mark.django_db


def write_csv(tmp_path, text, name="catalog.csv"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


GOOD = """sku,name,price,stock
MUG-1,Mug,1299,10
TEE-2,"T-shirt, black",1999,0
"""


def test_load_catalog_good_file(tmp_path, capsys):
    call_command("load_catalog", write_csv(tmp_path, GOOD))
    assert dict(Product.objects.values_list("sku", "price")) == {"MUG-1": 1299, "TEE-2": 1999}
    assert Product.objects.get(sku="TEE-2").name == "T-shirt, black"
    assert dict(Stock.objects.values_list("product_id", "available")) == {"MUG-1": 10, "TEE-2": 0}
    assert list(StockMovement.objects.values_list("product_id", "delta", "reason")) == [("MUG-1", 10, "received")]
    assert "2 products created, 0 updated" in capsys.readouterr().out
    assert all(row["difference"] == 0 for row in stock_audit())


def test_load_catalog_reimport_moves_stock_by_delta_without_duplicates(tmp_path):
    call_command("load_catalog", write_csv(tmp_path, GOOD))
    call_command("load_catalog", write_csv(tmp_path, GOOD))  # same file: nothing changes
    assert StockMovement.objects.count() == 1
    Stock.objects.filter(product_id="MUG-1").update(available=7, reserved=3)  # 3 units reserved meanwhile
    call_command("load_catalog", write_csv(tmp_path, "sku,name,price,stock\nMUG-1,Mug XL,1500,12\n", "second.csv"))
    stock = Stock.objects.get(product_id="MUG-1")
    assert (stock.available, stock.reserved) == (12, 3)
    assert Product.objects.get(sku="MUG-1").name == "Mug XL"
    assert Product.objects.count() == 2 and Stock.objects.count() == 2
    assert list(StockMovement.objects.filter(product_id="MUG-1").values_list("delta", "reason")) == [
        (5, "correction"),
        (10, "received"),
    ]


def test_load_catalog_bad_rows_are_all_reported_and_nothing_is_written(tmp_path, capsys):
    bad = """sku,name,price,stock
OK-1,Fine,100,1
bad sku,Name,100,1
OK-2,,100,1
OK-3,Price,12.50,1
OK-4,Price,0,1
OK-5,Stock,100,-3
OK-1,Again,100,1
OK-6,Short,100
"""
    with pytest.raises(CommandError, match="7 invalid row"):
        call_command("load_catalog", write_csv(tmp_path, bad))
    errors = capsys.readouterr().err
    for line in range(3, 10):
        assert f"line {line}:" in errors
    assert "line 2:" not in errors
    assert not Product.objects.exists()
    assert not StockMovement.objects.exists()


def test_load_catalog_wrong_header(tmp_path, capsys):
    with pytest.raises(CommandError):
        call_command("load_catalog", write_csv(tmp_path, "id,title\n1,x\n"))
    assert "header" in capsys.readouterr().err


def test_load_catalog_missing_file():
    with pytest.raises(CommandError, match="no such file"):
        call_command("load_catalog", "/nonexistent.csv")


def test_optional_description_and_image_url_columns(tmp_path):
    call_command(
        "load_catalog",
        write_csv(
            tmp_path,
            "sku,name,price,stock,description,image_url\n"
            "MUG-1,Mug,1299,10,A big mug,https://img.example.com/mug.jpg\n"
            "TEE-2,Tee,1999,0,,\n",
        ),
    )
    assert Product.objects.get(sku="MUG-1").description == "A big mug"
    assert Product.objects.get(sku="MUG-1").image_url == "https://img.example.com/mug.jpg"
    call_command("load_catalog", write_csv(tmp_path, GOOD))  # without the columns: left as they are
    assert Product.objects.get(sku="MUG-1").description == "A big mug"
    call_command("load_catalog", write_csv(tmp_path, "sku,name,price,stock,image_url\nMUG-1,Mug,1299,10,\n"))
    assert Product.objects.get(sku="MUG-1").image_url == "" and Product.objects.get(sku="MUG-1").description


@pytest.mark.parametrize(
    "text, message",
    [
        ("sku,name,price,stock,colour\nA,B,1,1,red\n", "header"),
        ("sku,name,price,stock,image_url,image_url\nA,B,1,1,x,y\n", "header"),
        ("sku,name,price,stock,image_url\nA,B,1,1,javascript:alert(1)\n", "image_url"),
        ("sku,name,price,stock,description\nA,B,1,1\n", "expected 5 columns"),
    ],
)
def test_bad_optional_columns_are_refused_whole(tmp_path, capsys, text, message):
    with pytest.raises(CommandError, match="nothing was written"):
        call_command("load_catalog", write_csv(tmp_path, text))
    assert message in capsys.readouterr().err
    assert not Product.objects.exists()


def test_optional_weight_and_tax_class_columns(tmp_path):
    call_command(
        "load_catalog",
        write_csv(tmp_path, "sku,name,price,stock,tax_class,weight_grams\nBOOK-1,Book,1299,5,reduced,450\n"),
    )
    book = Product.objects.get(sku="BOOK-1")
    assert (book.weight_grams, book.tax_class_id) == (450, "reduced")
    call_command("load_catalog", write_csv(tmp_path, "sku,name,price,stock\nBOOK-1,Book,1299,5\nMUG-1,Mug,999,1\n"))
    book.refresh_from_db()
    assert (book.weight_grams, book.tax_class_id) == (450, "reduced")  # without the columns: left as they are
    mug = Product.objects.get(sku="MUG-1")
    assert (mug.weight_grams, mug.tax_class_id) == (0, "standard")  # a new product: the defaults
    call_command("load_catalog", write_csv(tmp_path, "sku,name,price,stock,weight_grams\nBOOK-1,Book,1299,5,0\n"))
    book.refresh_from_db()
    assert (book.weight_grams, book.tax_class_id) == (0, "reduced")  # only the column the file has


def test_bad_weight_or_tax_class_names_the_row_and_nothing_is_written(tmp_path, capsys):
    text = """sku,name,price,stock,weight_grams,tax_class
OK-1,Fine,100,1,250,zero
OK-2,Heavy,100,1,10000001,standard
OK-3,Fraction,100,1,2.5,standard
OK-4,Blank,100,1,,standard
OK-5,Luxury,100,1,100,luxury
OK-6,Capital,100,1,100,Reduced
OK-7,No class,100,1,100,
"""
    with pytest.raises(CommandError, match="6 invalid row"):
        call_command("load_catalog", write_csv(tmp_path, text))
    errors = capsys.readouterr().err.splitlines()
    assert [error.split(":")[0] for error in errors] == [f"line {n}" for n in range(3, 9)]
    assert "weight_grams '10000001' must be a whole number of grams, 0 to 10000000" in errors[0]
    assert "weight_grams '2.5'" in errors[1] and "weight_grams ''" in errors[2]
    assert "tax_class 'luxury' does not exist (there are: reduced, standard, zero)" in errors[3]
    assert "tax_class 'Reduced' does not exist" in errors[4] and "tax_class '' does not exist" in errors[5]
    assert not Product.objects.exists()
