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
