-- The queue writer's clean-up after a batch, once per request however often
-- the batch is delivered: a request still in its SKU's pending set leaves it
-- and, when its order was written, its cart is cleared; its queued copy is
-- dropped either way.
-- KEYS: per request: pending set, queued copy, cart. ARGV: per request: order
-- id, 1 to clear the cart. Returns how many requests were cleaned up now.
local done = 0
for i = 1, #ARGV / 2 do
  if redis.call('ZREM', KEYS[3*i-2], ARGV[2*i-1]) == 1 then
    done = done + 1
    if ARGV[2*i] == '1' then redis.call('DEL', KEYS[3*i]) end
  end
  redis.call('DEL', KEYS[3*i-1])
end
return done
