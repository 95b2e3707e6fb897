-- KEYS: cart, generation, rate-limit window. ARGV: generation, sku, quantity (0
-- removes), ttl, max lines, rate limit (0: none), window in ms.
-- Returns {status, cart as a flat list (or ms to wait when limited)}.
if stale(KEYS[2], ARGV[1]) then return {-1, {}} end
local wait = limited(KEYS[3], ARGV[6], ARGV[7])
if wait then return {-3, wait} end
local quantity = tonumber(ARGV[3])
if quantity == 0 then
  redis.call('HDEL', KEYS[1], ARGV[2])
else
  if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0
     and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[5]) then
    return {-2, {}}
  end
  redis.call('HSET', KEYS[1], ARGV[2], quantity)
end
if redis.call('EXPIRE', KEYS[1], ARGV[4]) == 0 then return {0, {}} end
return {0, cart_lines(KEYS[1])}
