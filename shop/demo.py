"""The demo catalog that `manage.py seed_demo` loads: (sku, name, price in minor units, stock)."""

DEMO_PRODUCTS = [
    ("TSHIRT-BLK-M", "T-shirt, black, M", 1999, 120),
    ("TSHIRT-WHT-M", "T-shirt, white, M", 1999, 80),
    ("HOODIE-GRY-L", "Hoodie, grey, L", 4999, 40),
    ("CAP-NAVY", "Cap, navy", 1499, 60),
    ("SOCKS-3PK", "Socks, pack of 3", 999, 200),
    ("MUG-LOGO", "Mug with logo", 1299, 150),
    ("BOTTLE-STEEL", "Steel bottle 750 ml", 2499, 70),
    ("TOTE-CANVAS", "Canvas tote bag", 1599, 90),
    ("NOTEBOOK-A5", "Notebook A5, dotted", 899, 300),
    ("PEN-GEL-BLK", "Gel pen, black", 299, 500),
    ("STICKERS-10", "Sticker pack (10)", 499, 400),
    ("BACKPACK-20L", "Backpack 20 l", 6999, 25),
    ("HEADPHONES-BT", "Bluetooth headphones", 8999, 15),
    ("CHARGER-USBC", "USB-C charger 65 W", 3499, 50),
    ("CABLE-USBC-1M", "USB-C cable 1 m", 1199, 250),
    ("MOUSEPAD-XL", "Mouse pad XL", 1999, 75),
    ("LAMP-DESK", "Desk lamp", 3999, 30),
    ("PLANT-POT-S", "Plant pot, small", 1099, 45),
    ("CONSOLE-LTD", "Game console, limited edition (flash sale)", 49999, 10),
    ("POSTER-A2", "Poster A2", 1499, 0),
]
