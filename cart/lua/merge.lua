-- A guest cart into a shopper's, once: the token dies here, so a second merge of
-- the same cart (a double click on "log in") finds nothing. KEYS: guest cart, its
-- token's liveness key, the shopper's cart. ARGV: max quantity, max lines, the
-- shopper's cart TTL. Lines as merge_lines (cart.lua). Returns the lines merged,
-- or NO_GUEST_CART when the token had no live cart. (On a Redis Cluster the two
-- carts may lie on two shards: guest_lines.lua, then merge_lines.lua.)
if redis.call('DEL', KEYS[2]) == 0 then return NO_GUEST_CART end
local merged, changed = merge_lines(KEYS[3], redis.call('HGETALL', KEYS[1]), tonumber(ARGV[1]), tonumber(ARGV[2]))
redis.call('DEL', KEYS[1])
if merged > 0 or changed then redis.call('EXPIRE', KEYS[3], ARGV[3]) end
return merged
