-- A live guest cart's flat list, for a merge on a Redis Cluster (cart/storage.py,
-- merge_guest_cart): KEYS: guest cart, its token's liveness key. Returns the
-- list, or NO_GUEST_CART when the token has no live cart.
if redis.call('EXISTS', KEYS[2]) == 0 then return NO_GUEST_CART end
return redis.call('HGETALL', KEYS[1])
