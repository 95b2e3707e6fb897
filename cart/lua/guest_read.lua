-- A guest cart. KEYS: cart, its token's liveness key, generation. ARGV: generation.
if stale(KEYS[3], ARGV[1]) then return {STALE, {}} end
if redis.call('EXISTS', KEYS[2]) == 0 then return {NO_GUEST_CART, {}} end
return {0, cart_lines(KEYS[1])}
