-- The cart a checkout took, given back because it wrote no order (failed, a
-- replay, a queued order rejected). Lines the shopper set since win; nothing
-- happens when the taken cart is gone or another checkout took the cart since.
-- KEYS: per cart: cart, taken. ARGV: cart TTL, then per cart: checkout key.
-- Returns how many carts were given back.
local given = 0
for i = 1, #KEYS / 2 do
  local cart, taken = KEYS[2*i - 1], KEYS[2*i]
  if redis.call('HGET', taken, '@checkout') == ARGV[i + 1] then
    local lines = redis.call('HGETALL', taken)
    for j = 1, #lines, 2 do
      if lines[j] ~= '@checkout' then redis.call('HSETNX', cart, lines[j], lines[j + 1]) end
    end
    redis.call('DEL', taken)
    redis.call('EXPIRE', cart, ARGV[1])
    given = given + 1
  end
end
return given
