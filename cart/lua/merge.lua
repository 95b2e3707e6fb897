-- A guest cart into a shopper's, once: the token dies here, so a second merge of
-- the same cart (a double click on "log in") finds nothing. KEYS: guest cart, its
-- token's liveness key, the shopper's cart. ARGV: max quantity, max lines, the
-- shopper's cart TTL. A SKU in both keeps the larger quantity (capped); a new SKU
-- joins while the shopper's cart has room; the guest's voucher and shipping
-- method, the ones the shopper chose last, replace the cart's. Returns the lines merged, or
-- NO_GUEST_CART when the token had no live cart.
if redis.call('DEL', KEYS[2]) == 0 then return NO_GUEST_CART end
local lines = redis.call('HGETALL', KEYS[1])
local merged, most, room, changed = 0, tonumber(ARGV[1]), tonumber(ARGV[2]), false
for i = 1, #lines, 2 do
  local sku = lines[i]
  if sku == VOUCHER_FIELD or sku == SHIPPING_FIELD then
    redis.call('HSET', KEYS[3], sku, lines[i + 1])
    changed = true
  else
    local quantity = math.min(tonumber(lines[i + 1]), most)
    local mine = redis.call('HGET', KEYS[3], sku)
    if mine then
      redis.call('HSET', KEYS[3], sku, math.max(tonumber(mine), quantity))
      merged = merged + 1
    elseif line_count(KEYS[3]) < room then
      redis.call('HSET', KEYS[3], sku, quantity)
      merged = merged + 1
    end
  end
end
redis.call('DEL', KEYS[1])
if merged > 0 or changed then redis.call('EXPIRE', KEYS[3], ARGV[3]) end
return merged
