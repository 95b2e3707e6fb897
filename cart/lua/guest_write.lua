-- A guest cart's write. KEYS: cart, its token's liveness key, generation, the
-- token's rate-limit window, the client address's window. ARGV: generation, sku,
-- quantity (0 removes), ttl, max lines, token limit, its ms, address limit, its
-- ms, '1' to create the cart (a new token), else '0'.
-- Returns {status, ...} as write.lua; -4: no live cart for that token.
if stale(KEYS[3], ARGV[1]) then return {-1, {}} end
local wait = limited(KEYS[5], ARGV[8], ARGV[9])
if wait then return {-3, wait} end
if ARGV[10] == '1' then
  if not redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[4]) then return {-4, {}} end
elseif redis.call('EXPIRE', KEYS[2], ARGV[4]) == 0 then
  return {-4, {}}
end
wait = limited(KEYS[4], ARGV[6], ARGV[7])
if wait then return {-3, wait} end
return set_line(KEYS[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5])
