-- KEYS: replay marker, (remaining, bought) per SKU, refusals, cart edits.
-- ARGV: customer, (sku, quantity, limit, opens, closes) per SKU.
if redis.call('EXISTS', KEYS[1]) == 1 then return {'replay', ''} end
local lines = {}
for i = 1, (#ARGV - 1) / 5 do
  local at = 5 * (i - 1) + 1
  lines[i] = {ARGV[at + 1], tonumber(ARGV[at + 2]), tonumber(ARGV[at + 3]), KEYS[2*i], KEYS[2*i+1],
              tonumber(ARGV[at + 4]), tonumber(ARGV[at + 5])}
end
local verdict, sku = admit(ARGV[1], lines, KEYS[#KEYS - 1], KEYS[#KEYS])
return {verdict, sku}
