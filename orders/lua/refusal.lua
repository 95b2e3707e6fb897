-- Checkout's early refusal (orders/early_refusal.py), composed from the same
-- functions as admission.lua: the answer admission.lua would give a checkout
-- that the rate limit or the gate refuses, for the cost of this call alone.
-- It takes no units; when it refuses it counts what admission.lua would count
-- (the rate-limit window, the refusals hash), and when it lets the checkout on
-- it counts nothing, so that admission.lua counts it once.
-- KEYS: cart, generation, rate-limit window, replay marker, refusals, then
-- (remaining, bought) per gated SKU. ARGV: generation, rate limit (0: none),
-- window ms, customer, then (sku, per-customer limit, window opens, closes) per
-- gated SKU, then (refusals-hash field, count) per count of refusals the
-- process answered from memory since its last call (RefusalMemory): added to
-- the hash first, whatever the answer, so that they cost no call of their own.
-- Returns {verdict, SKU or ms to wait, then every gated SKU now sold out};
-- verdict: stale, pass, rate_limited, sold_out or limit_reached.
local skus = (#KEYS - 5) / 2
for j = 5 + 4 * skus, #ARGV - 1, 2 do redis.call('HINCRBY', KEYS[5], ARGV[j], ARGV[j + 1]) end
if stale(KEYS[2], ARGV[1]) then return {'stale', ''} end
local sold_out, lines = {}, {}
for i = 1, skus do
  local sku, remaining = ARGV[1 + 4*i], KEYS[4 + 2*i]
  local left = redis.call('GET', remaining)
  if left and tonumber(left) <= 0 then sold_out[#sold_out + 1] = sku end
  local quantity = cart_quantity(KEYS[1], sku)
  if quantity then
    lines[#lines + 1] = {sku, quantity, tonumber(ARGV[2 + 4*i]), remaining, KEYS[5 + 2*i], tonumber(ARGV[3 + 4*i]),
                         tonumber(ARGV[4 + 4*i])}
  end
end
-- A cart without gated lines, or a replay of an order that exists: the
-- checkout goes on, and admission.lua answers it.
if #lines == 0 or redis.call('EXISTS', KEYS[4]) == 1 then return {'pass', '', unpack(sold_out)} end
local verdict, sku = refused(ARGV[4], lines)
if not verdict or verdict == 'missing' or verdict == 'not_started' or verdict == 'ended' then
  return {'pass', '', unpack(sold_out)}  -- admission.lua answers these
end
local wait = limited(KEYS[3], ARGV[2], ARGV[3])
if wait then
  for _, line in ipairs(lines) do redis.call('HINCRBY', KEYS[5], line[1] .. RATE_LIMITED_SUFFIX, 1) end
  return {'rate_limited', wait, unpack(sold_out)}
end
count_refusal(KEYS[5], verdict, sku)
return {verdict, sku, unpack(sold_out)}
