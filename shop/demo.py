"""The demo catalog that `manage.py seed_demo` loads: (sku, name, price in minor units, stock,
weight in grams), and how it ships."""

DEMO_PRODUCTS = [
    ("TSHIRT-BLK-M", "T-shirt, black, M", 1999, 120, 180),
    ("TSHIRT-WHT-M", "T-shirt, white, M", 1999, 80, 180),
    ("HOODIE-GRY-L", "Hoodie, grey, L", 4999, 40, 650),
    ("CAP-NAVY", "Cap, navy", 1499, 60, 120),
    ("SOCKS-3PK", "Socks, pack of 3", 999, 200, 150),
    ("MUG-LOGO", "Mug with logo", 1299, 150, 350),
    ("BOTTLE-STEEL", "Steel bottle 750 ml", 2499, 70, 400),
    ("TOTE-CANVAS", "Canvas tote bag", 1599, 90, 200),
    ("NOTEBOOK-A5", "Notebook A5, dotted", 899, 300, 250),
    ("PEN-GEL-BLK", "Gel pen, black", 299, 500, 20),
    ("STICKERS-10", "Sticker pack (10)", 499, 400, 30),
    ("BACKPACK-20L", "Backpack 20 l", 6999, 25, 900),
    ("HEADPHONES-BT", "Bluetooth headphones", 8999, 15, 300),
    ("CHARGER-USBC", "USB-C charger 65 W", 3499, 50, 250),
    ("CABLE-USBC-1M", "USB-C cable 1 m", 1199, 250, 60),
    ("MOUSEPAD-XL", "Mouse pad XL", 1999, 75, 500),
    ("LAMP-DESK", "Desk lamp", 3999, 30, 1500),
    ("PLANT-POT-S", "Plant pot, small", 1099, 45, 700),
    ("CONSOLE-LTD", "Game console, limited edition (flash sale)", 49999, 10, 4200),
    ("POSTER-A2", "Poster A2", 1499, 0, 150),
]

# Zones: (name, countries). The EU's members, and the United Kingdom.
EU = "AT BE BG CY CZ DE DK EE ES FI FR GR HR HU IE IT LT LU LV MT NL PL PT RO SE SI SK".split()
DEMO_ZONES = [("United Kingdom", ["GB"]), ("European Union", EU)]
# Methods: (code, name, zone, flat price or weight bands [(up to grams, price)], free over, days).
DEMO_SHIPPING = [
    ("standard", "Standard delivery", "United Kingdom", 499, None, (2, 4)),
    ("express", "Express delivery", "United Kingdom", 999, None, (1, 1)),
    ("eu-standard", "EU delivery", "European Union", [(1000, 699), (5000, 1299), (20000, 2499)], 7500, (3, 6)),
]
