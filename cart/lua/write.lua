-- KEYS: cart, generation, rate-limit window. ARGV: generation, sku, quantity (0
-- removes), ttl, max lines, rate limit (0: none), window in ms.
-- Returns {status, cart as a flat list (or ms to wait when limited)}.
if stale(KEYS[2], ARGV[1]) then return {STALE, {}} end
local wait = limited(KEYS[3], ARGV[6], ARGV[7])
if wait then return {LIMITED, wait} end
return set_line(KEYS[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
