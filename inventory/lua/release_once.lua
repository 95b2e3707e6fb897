-- Several releases, each at most once: a release whose token is already set
-- (a redelivered batch of the queue's writer) gives nothing back again.
-- KEYS: per release: its token, then (remaining, bought) per SKU.
-- ARGV: token TTL, then per release: customer, SKU count n, n quantities.
-- Returns how many releases gave their units back now.
local k, a, released = 1, 2, 0
while a <= #ARGV do
  local customer, n = ARGV[a], tonumber(ARGV[a+1])
  if redis.call('SET', KEYS[k], '1', 'NX', 'EX', ARGV[1]) then
    released = released + 1
    for i = 1, n do
      give_back(customer, KEYS[k+2*i-1], KEYS[k+2*i], tonumber(ARGV[a+1+i]))
    end
  end
  k, a = k + 1 + 2*n, a + 2 + n
end
return released
