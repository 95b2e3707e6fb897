-- What a process asks the gate once every SOLD_OUT_MEMORY_MS while it answers
-- a sold-out sale's refusals itself (orders/lua/cart_refusal.lua): which of
-- the gated SKUs have no unit left. It first adds the refusals the process
-- answered since its last call, so that they cost no call of their own.
-- KEYS: refusals, then the remaining counter per SKU. ARGV: the SKUs, then
-- (refusals-hash field, count) pairs. Returns the SKUs sold out.
for j = #KEYS, #ARGV - 1, 2 do redis.call('HINCRBY', KEYS[1], ARGV[j], ARGV[j + 1]) end
local sold_out = {}
for i = 2, #KEYS do
  local left = redis.call('GET', KEYS[i])
  if left and tonumber(left) <= 0 then sold_out[#sold_out + 1] = ARGV[i - 1] end
end
return sold_out
