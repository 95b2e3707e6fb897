-- KEYS: replay marker, (remaining, bought) per SKU, refusals. ARGV: customer,
-- (sku, quantity, limit) per SKU.
if redis.call('EXISTS', KEYS[1]) == 1 then return {'replay', ''} end
local lines = {}
for i = 1, (#ARGV - 1) / 3 do
  lines[i] = {ARGV[3*i-1], tonumber(ARGV[3*i]), tonumber(ARGV[3*i+1]), KEYS[2*i], KEYS[2*i+1]}
end
local verdict, sku = admit(ARGV[1], lines, KEYS[#KEYS])
return {verdict, sku}
