-- A cart's voucher, in two calls around the database's look-up of the code
-- (cart/services.py). KEYS: cart, generation, the guest token's liveness key
-- (a shopper's: the cart key again), shopper's (or token's) window, the client
-- address's window. ARGV: generation, 'check' (count one attempt against both
-- windows and read the cart: before the look-up, so guessing codes is limited)
-- or 'set', the code ('' removes it), cart TTL, then each window's limit and ms;
-- or 'shipping' and the shipping method ('' removes it) and cart TTL: the same
-- checks, the SHIPPING_FIELD set instead, no attempt counted.
-- Returns {status, the cart as a flat list (or ms to wait when limited)}.
if stale(KEYS[2], ARGV[1]) then return {STALE, {}} end
if KEYS[3] ~= KEYS[1] and redis.call('EXISTS', KEYS[3]) == 0 then return {NO_GUEST_CART, {}} end
if ARGV[2] == 'check' then
  local wait = limited(KEYS[4], ARGV[5], ARGV[6]) or limited(KEYS[5], ARGV[7], ARGV[8])
  if wait then return {LIMITED, wait} end
  return {0, cart_lines(KEYS[1])}
end
if KEYS[3] ~= KEYS[1] then redis.call('EXPIRE', KEYS[3], ARGV[4]) end
if ARGV[2] == 'shipping' then return set_voucher(KEYS[1], ARGV[3], ARGV[4], SHIPPING_FIELD) end
return set_voucher(KEYS[1], ARGV[3], ARGV[4])
