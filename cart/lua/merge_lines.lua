-- A guest cart's lines into a shopper's cart, on the shopper's shard (a merge on
-- a Redis Cluster). KEYS: the shopper's cart. ARGV: max quantity, max lines, the
-- cart TTL, then the guest cart as a flat list. Returns the lines merged.
local merged, changed = merge_lines(KEYS[1], {unpack(ARGV, 4)}, tonumber(ARGV[1]), tonumber(ARGV[2]))
if merged > 0 or changed then redis.call('EXPIRE', KEYS[1], ARGV[3]) end
return merged
