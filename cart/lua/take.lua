-- A checkout's cart, taken (cart.lua's checkout_lines and take_cart), for a
-- gate on a Redis of its own (the default composes this into
-- orders/lua/admission.lua).
-- KEYS: cart, generation, rate-limit window, taken cart. ARGV: generation, rate
-- limit (0: none), window in ms, checkout key, taken cart's TTL.
-- Returns {status, lines (or ms to wait), 1 when taken now}.
if stale(KEYS[2], ARGV[1]) then return {STALE, {}, 0} end
local wait = limited(KEYS[3], ARGV[2], ARGV[3])
if wait then return {LIMITED, wait, 0} end
local lines, in_place = checkout_lines(KEYS[1], KEYS[4], ARGV[4])
if not in_place or #lines == 0 then return {0, lines, 0} end
take_cart(KEYS[1], KEYS[4], ARGV[4], ARGV[5])
return {0, lines, 1}
