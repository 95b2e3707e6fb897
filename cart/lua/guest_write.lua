-- A guest cart's write. KEYS: cart, its token's liveness key, generation, the
-- token's rate-limit window, the client address's window, the address's window
-- of new guest carts. ARGV: generation, sku, quantity (0 removes), ttl, max
-- lines, token limit, its ms, address limit, its ms, '1' to create the cart (a
-- new token), else '0', new-cart limit, its ms, a new cart's ttl.
-- A new cart lives the short ttl; its token's next write gives it the full one
-- (a flood of one-write carts from fresh tokens expires within the short ttl).
-- Returns {status, ...} as write.lua; NO_GUEST_CART: no live cart for that token.
if stale(KEYS[3], ARGV[1]) then return {STALE, {}} end
local wait = limited(KEYS[5], ARGV[8], ARGV[9])
if wait then return {LIMITED, wait} end
local ttl = ARGV[4]
if ARGV[10] == '1' then
  wait = limited(KEYS[6], ARGV[11], ARGV[12])
  if wait then return {LIMITED, wait} end
  ttl = ARGV[13]
  if not redis.call('SET', KEYS[2], '1', 'NX', 'EX', ttl) then return {NO_GUEST_CART, {}} end
elseif redis.call('EXPIRE', KEYS[2], ttl) == 0 then
  return {NO_GUEST_CART, {}}
end
wait = limited(KEYS[4], ARGV[6], ARGV[7])
if wait then return {LIMITED, wait} end
return set_line(KEYS[1], ARGV[2], ARGV[3], ttl, ARGV[5])
