-- What a process asks the gate once every SOLD_OUT_MEMORY_MS while it answers
-- a sold-out sale's refusals itself (orders/services/admission.py): which of
-- the gated SKUs have no unit left, how many shoppers bought each, and the
-- cart edits per stripe of shoppers (gate.py, note_cart_edit). It first adds
-- the refusals the process answered since its last call, so that they cost
-- no call of their own.
-- KEYS: refusals, cart edits, then (remaining, bought) per SKU. ARGV: the
-- SKUs, then (refusals-hash field, count) pairs. Returns {SKUs sold out, the
-- cart edits hash as a flat list, shoppers who bought each SKU (HLEN), in
-- ARGV's order}.
local skus = (#KEYS - 2) / 2
for j = skus + 1, #ARGV - 1, 2 do redis.call('HINCRBY', KEYS[1], ARGV[j], ARGV[j + 1]) end
local sold_out, buyers = {}, {}
for i = 1, skus do
  local left = redis.call('GET', KEYS[1 + 2*i])
  if left and tonumber(left) <= 0 then sold_out[#sold_out + 1] = ARGV[i] end
  buyers[i] = redis.call('HLEN', KEYS[2 + 2*i])
end
return {sold_out, redis.call('HGETALL', KEYS[2]), buyers}
