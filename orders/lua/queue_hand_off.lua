-- A queued checkout's records in Redis, unless its Idempotency-Key has an
-- order id already (a twin request won it, or the request is a replay): then
-- nothing is written and that id is returned.
-- KEYS: the key's order id, the queued copy, the SKU's pending set, the SKUs
-- with a pending set, the SKU's claims. ARGV: order id, the request (JSON),
-- admitted at (epoch seconds), seconds kept, SKU, the request's claim (JSON).
local known = redis.call('GET', KEYS[1])
if known then return known end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[4])
redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[4])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
redis.call('SADD', KEYS[4], ARGV[5])
redis.call('HSET', KEYS[5], ARGV[1], ARGV[6])
return false
