-- The queue writer's clean-up after a batch, once per request however often
-- the batch is delivered: a request still in its SKU's pending set leaves it
-- and, when no order was written for it, the cart its checkout took is given
-- back (cart.lua's give_back_cart); its queued copy and its claim are dropped
-- either way.
-- KEYS: per request: pending set, queued copy, cart, taken cart, claims. ARGV:
-- cart TTL, then per request: order id, 1 when written (else 0, or v: rejected
-- as its voucher was used up, which the cart gets back without), checkout key.
-- ARGV[1] empty: the carts are on a Redis Cluster (core/sharding.py), not here;
-- the caller gives them back, and the script returns instead the order ids of
-- the requests cleaned up now that wrote no order.
-- Returns how many requests were cleaned up now (or those order ids).
local done, to_give_back = 0, {}
for i = 1, (#ARGV - 1) / 3 do
  local pending, copy, cart, taken, claims = KEYS[5*i - 4], KEYS[5*i - 3], KEYS[5*i - 2], KEYS[5*i - 1], KEYS[5*i]
  local order_id, written, checkout = ARGV[3*i - 1], ARGV[3*i], ARGV[3*i + 1]
  if redis.call('ZREM', pending, order_id) == 1 then
    done = done + 1
    if written ~= '1' then
      if ARGV[1] == '' then
        to_give_back[#to_give_back + 1] = order_id
      else
        give_back_cart(cart, taken, checkout, ARGV[1], written == 'v')
      end
    end
  end
  redis.call('DEL', copy)
  redis.call('HDEL', claims, order_id)
end
if ARGV[1] == '' then return to_give_back end
return done
