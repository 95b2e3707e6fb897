-- Checkout's early refusal with the gate on a Redis of its own (or carts on a
-- Redis Cluster): run on the cart's Redis, never the gate's. The process
-- knows which gated SKUs the gate last called sold out (asked again every
-- SOLD_OUT_MEMORY_MS); this reads the cart and refuses the checkout when the
-- first gated line the gate would judge (gate.admit's order: by SKU) is one
-- of those, in its sale's window. It takes nothing; when it refuses it counts
-- the rate-limit window as admission would. Anything else is the gate's to
-- answer on the ordinary path: a cart without gated lines, a first gated line
-- not known sold out (its limit may refuse it), or a checkout of this shopper
-- in flight or written in the last TAKEN_CART_TTL_SECONDS (its taken cart:
-- a retry finds its order there).
-- KEYS: cart, generation (beside the cart), rate-limit window, taken cart.
-- ARGV: generation, rate limit (0: none), window ms, then (sku, 1 when known
-- sold out else 0, window opens, closes) per gated SKU, by SKU.
-- Returns {verdict, SKU or ms to wait, then the cart's gated SKUs};
-- verdict: stale, pass, rate_limited or sold_out.
if stale(KEYS[2], ARGV[1]) then return {'stale', ''} end
if redis.call('EXISTS', KEYS[4]) == 1 then return {'pass', ''} end
local held, first = {}, nil
for i = 4, #ARGV - 3, 4 do
  if cart_quantity(KEYS[1], ARGV[i]) then
    held[#held + 1] = ARGV[i]
    if not first then first = i end
  end
end
if not first or ARGV[first + 1] ~= '1' then return {'pass', ''} end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local closes = tonumber(ARGV[first + 3])
if now < tonumber(ARGV[first + 2]) or (closes > 0 and now >= closes) then return {'pass', ''} end
local wait = limited(KEYS[3], ARGV[2], ARGV[3])
if wait then return {'rate_limited', wait, unpack(held)} end
return {'sold_out', ARGV[first], unpack(held)}
