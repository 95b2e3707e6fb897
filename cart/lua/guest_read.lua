-- A guest cart. KEYS: cart, its token's liveness key, generation. ARGV: generation.
if stale(KEYS[3], ARGV[1]) then return {-1, {}} end
if redis.call('EXISTS', KEYS[2]) == 0 then return {-4, {}} end
return {0, cart_lines(KEYS[1])}
