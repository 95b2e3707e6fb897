-- KEYS: (remaining, bought) per SKU. ARGV: customer, quantity per SKU.
-- Gives back what admit took; a counter that is gone (sale ended) stays gone.
local customer = ARGV[1]
for i = 1, #KEYS / 2 do
  if redis.call('EXISTS', KEYS[2*i-1]) == 1 then
    redis.call('INCRBY', KEYS[2*i-1], ARGV[i+1])
    if redis.call('HINCRBY', KEYS[2*i], customer, -tonumber(ARGV[i+1])) <= 0 then
      redis.call('HDEL', KEYS[2*i], customer)
    end
  end
end
return 1
