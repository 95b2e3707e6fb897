-- KEYS: cart, generation, rate-limit window. ARGV: generation, rate limit (0: none), window in ms.
if stale(KEYS[2], ARGV[1]) then return {STALE, {}} end
local wait = limited(KEYS[3], ARGV[2], ARGV[3])
if wait then return {LIMITED, wait} end
return {0, cart_lines(KEYS[1])}
