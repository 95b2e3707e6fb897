-- The cart's public Lua functions (hash cart:{customer}, field = SKU, value = quantity).

-- cart_lines(cart_key): the cart as a flat {sku, quantity, ...} list.
local function cart_lines(cart_key)
  return redis.call('HGETALL', cart_key)
end

-- cart_quantity(cart_key, sku): the quantity of one line, or nil.
local function cart_quantity(cart_key, sku)
  local quantity = redis.call('HGET', cart_key, sku)
  if quantity then return tonumber(quantity) end
  return nil
end

-- set_line(cart_key, sku, quantity, ttl, max_lines): set one line (0 removes it),
-- refresh the TTL; {0, the cart as a flat list}, or {-2, {}} when the cart is full.
local function set_line(cart_key, sku, quantity, ttl, max_lines)
  quantity = tonumber(quantity)
  if quantity == 0 then
    redis.call('HDEL', cart_key, sku)
  else
    if redis.call('HEXISTS', cart_key, sku) == 0 and redis.call('HLEN', cart_key) >= tonumber(max_lines) then
      return {-2, {}}
    end
    redis.call('HSET', cart_key, sku, quantity)
  end
  if redis.call('EXPIRE', cart_key, ttl) == 0 then return {0, {}} end
  return {0, cart_lines(cart_key)}
end
