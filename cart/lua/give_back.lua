-- The carts checkouts took, given back because they wrote no order (failed,
-- a replay, a refusal): cart.lua's give_back_cart for each.
-- KEYS: per cart: cart, taken. ARGV: cart TTL, '1' to leave their vouchers out
-- (refused as used up), then per cart: checkout key.
-- Returns how many carts were given back.
local given = 0
for i = 1, #KEYS / 2 do
  given = given + give_back_cart(KEYS[2*i - 1], KEYS[2*i], ARGV[i + 2], ARGV[1], ARGV[2] == '1')
end
return given
