-- give_back(customer, remaining key, bought key, quantity): what admit took for
-- one SKU, back; a counter that is gone (sale ended) stays gone.
local function give_back(customer, remaining, bought, quantity)
  if redis.call('EXISTS', remaining) == 1 then
    redis.call('INCRBY', remaining, quantity)
    if redis.call('HINCRBY', bought, customer, -quantity) <= 0 then
      redis.call('HDEL', bought, customer)
    end
  end
end
