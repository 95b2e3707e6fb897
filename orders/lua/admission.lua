-- Checkout's admission in one call, composed from the public functions of the
-- hot cache (stale), the rate limits (limited), the cart (cart_lines,
-- cart_quantity) and the gate (admit).
-- KEYS: cart, generation, rate-limit window, replay marker, refusals, saved
-- address, then (remaining, bought) per gated SKU. ARGV: generation, rate limit
-- (0: none), window ms, customer, then (sku, per-customer limit) per gated SKU.
-- Returns {status, cart (or ms to wait when limited), verdict, sku, saved
-- address (false: not in Redis)}.
if stale(KEYS[2], ARGV[1]) then return {-1, {}, '', ''} end
local wait = limited(KEYS[3], ARGV[2], ARGV[3])
if wait then
  -- counted per gated SKU in the cart, for the live flash-sale page
  for i = 1, (#ARGV - 4) / 2 do
    local sku = ARGV[3 + 2*i]
    if cart_quantity(KEYS[1], sku) then redis.call('HINCRBY', KEYS[5], sku .. '|rate_limited', 1) end
  end
  return {-3, wait, '', ''}
end
local cart = cart_lines(KEYS[1])
local address = redis.call('GET', KEYS[6])
local lines = {}
for i = 1, (#ARGV - 4) / 2 do
  local sku = ARGV[3 + 2*i]
  local quantity = cart_quantity(KEYS[1], sku)
  if quantity then
    lines[#lines + 1] = {sku, quantity, tonumber(ARGV[4 + 2*i]), KEYS[5 + 2*i], KEYS[6 + 2*i]}
  end
end
if #lines == 0 then return {0, cart, 'none', '', address} end
if redis.call('EXISTS', KEYS[4]) == 1 then return {0, cart, 'replay', '', address} end
local verdict, sku = admit(ARGV[4], lines, KEYS[5])
return {0, cart, verdict, sku, address}
