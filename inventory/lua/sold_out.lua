-- What a process asks the gate once every SOLD_OUT_MEMORY_MS while it answers
-- a sold-out sale's refusals itself (orders/services/admission.py): which of
-- the gated SKUs have no unit left, and the cart edits per stripe of shoppers
-- (gate.py, note_cart_edit). It first adds the refusals the process answered
-- since its last call, so that they cost no call of their own.
-- KEYS: refusals, cart edits, then the remaining counter per SKU. ARGV: the
-- SKUs, then (refusals-hash field, count) pairs. Returns {SKUs sold out, the
-- cart edits hash as a flat list}.
for j = #KEYS - 1, #ARGV - 1, 2 do redis.call('HINCRBY', KEYS[1], ARGV[j], ARGV[j + 1]) end
local sold_out = {}
for i = 3, #KEYS do
  local left = redis.call('GET', KEYS[i])
  if left and tonumber(left) <= 0 then sold_out[#sold_out + 1] = ARGV[i - 2] end
end
return {sold_out, redis.call('HGETALL', KEYS[2])}
