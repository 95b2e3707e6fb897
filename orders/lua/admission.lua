-- Checkout's admission in one call, composed from the public functions of the
-- hot cache (stale), the rate limits (limited), the cart (checkout_lines,
-- take_cart, cart_quantity) and the gate (admit). An admitted cart is taken:
-- set aside for this checkout, so that no call is needed once the order is
-- written (orders/services/checkout.py gives it back when none is).
-- KEYS: cart, generation, rate-limit window, replay marker, refusals, saved
-- address, taken cart, then (remaining, bought) per gated SKU, then the gate's
-- cart edits (admit counts an admission there). ARGV:
-- generation, rate limit (0: none), window ms, customer, checkout key, taken
-- cart's TTL, then (sku, per-customer limit, window opens, closes) per gated SKU.
-- Returns {status, cart (or ms to wait when limited), verdict, sku, saved
-- address (false: not in Redis), 1 when the cart was taken now}.
if stale(KEYS[2], ARGV[1]) then return {STALE, {}, '', ''} end
local wait = limited(KEYS[3], ARGV[2], ARGV[3])
if wait then
  -- counted per gated SKU in the cart, for the live flash-sale page
  for i = 1, (#ARGV - 6) / 4 do
    local sku = ARGV[3 + 4*i]
    if cart_quantity(KEYS[1], sku) then redis.call('HINCRBY', KEYS[5], sku .. RATE_LIMITED_SUFFIX, 1) end
  end
  return {LIMITED, wait, '', ''}
end
local cart, in_place = checkout_lines(KEYS[1], KEYS[7], ARGV[5])
local address = redis.call('GET', KEYS[6])
local quantities = {}
for i = 1, #cart, 2 do quantities[cart[i]] = tonumber(cart[i + 1]) end
local lines = {}
for i = 1, (#ARGV - 6) / 4 do
  local sku = ARGV[3 + 4*i]
  if quantities[sku] then
    lines[#lines + 1] = {sku, quantities[sku], tonumber(ARGV[4 + 4*i]), KEYS[6 + 2*i], KEYS[7 + 2*i],
                         tonumber(ARGV[5 + 4*i]), tonumber(ARGV[6 + 4*i])}
  end
end
local verdict, sku = 'none', ''
if #lines > 0 then
  if redis.call('EXISTS', KEYS[4]) == 1 then verdict = 'replay' else verdict, sku = admit(ARGV[4], lines, KEYS[5], KEYS[#KEYS]) end
end
local taken = 0
if in_place and #cart > 0 and (verdict == 'none' or verdict == 'replay' or verdict == 'admitted') then
  take_cart(KEYS[1], KEYS[7], ARGV[5], ARGV[6])
  taken = 1
end
return {0, cart, verdict, sku, address, taken}
