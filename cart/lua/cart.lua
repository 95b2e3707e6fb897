-- The cart's public Lua functions (hash cart:{customer}, field = SKU, value =
-- quantity; the voucher's code under the field VOUCHER_FIELD and the shipping
-- method and country under SHIPPING_FIELD, which no SKU can be).

-- cart_lines(cart_key): the cart as a flat {sku, quantity, ...} list, the
-- voucher's {VOUCHER_FIELD, code} among them when the cart has one.
local function cart_lines(cart_key)
  return redis.call('HGETALL', cart_key)
end

-- line_count(cart_key): how many lines the cart holds (its voucher and shipping are not).
local function line_count(cart_key)
  return redis.call('HLEN', cart_key) - redis.call('HEXISTS', cart_key, VOUCHER_FIELD)
    - redis.call('HEXISTS', cart_key, SHIPPING_FIELD)
end

-- cart_quantity(cart_key, sku): the quantity of one line, or nil.
local function cart_quantity(cart_key, sku)
  local quantity = redis.call('HGET', cart_key, sku)
  if quantity then return tonumber(quantity) end
  return nil
end

-- set_line(cart_key, sku, quantity, ttl, max_lines): set one line (0 removes it),
-- refresh the TTL; {0, the cart as a flat list}, or {FULL, {}} when the cart is full.
local function set_line(cart_key, sku, quantity, ttl, max_lines)
  quantity = tonumber(quantity)
  if quantity == 0 then
    redis.call('HDEL', cart_key, sku)
  else
    if redis.call('HEXISTS', cart_key, sku) == 0 and line_count(cart_key) >= tonumber(max_lines) then
      return {FULL, {}}
    end
    redis.call('HSET', cart_key, sku, quantity)
  end
  if redis.call('EXPIRE', cart_key, ttl) == 0 then return {0, {}} end
  return {0, cart_lines(cart_key)}
end

-- taken_lines(taken_key): what a checkout set aside, as a flat list without
-- its key's field.
local function taken_lines(taken_key)
  local taken, lines = redis.call('HGETALL', taken_key), {}
  for i = 1, #taken, 2 do
    if taken[i] ~= '@checkout' then lines[#lines + 1] = taken[i]; lines[#lines + 1] = taken[i + 1] end
  end
  return lines
end

-- checkout_lines(cart_key, taken_key, checkout): the cart a checkout under the
-- idempotency key `checkout` orders (flat list) and whether it is the cart in
-- place: the cart, or when it has no line, what an earlier attempt under the
-- same key took (a retry of a checkout that died before its answer). The
-- cart's voucher comes with its lines.
local function checkout_lines(cart_key, taken_key, checkout)
  local lines = cart_lines(cart_key)
  if line_count(cart_key) > 0 then return lines, true end
  if redis.call('HGET', taken_key, '@checkout') ~= checkout then return lines, false end
  return taken_lines(taken_key), false
end

-- take_cart(cart_key, taken_key, checkout, ttl): the checkout takes the cart:
-- set aside under taken_key for ttl seconds, for a retry under the same key, or
-- to be given back (give_back.lua) when the checkout writes no order. A SKU
-- never contains '@' (shop's CHECK), so the key's field cannot be a line.
local function take_cart(cart_key, taken_key, checkout, ttl)
  redis.call('RENAME', cart_key, taken_key)
  redis.call('HSET', taken_key, '@checkout', checkout)
  redis.call('EXPIRE', taken_key, ttl)
end

-- give_back_cart(cart_key, taken_key, checkout, ttl, drop_voucher): the cart
-- the checkout under `checkout` took, back into the cart (lines and a voucher
-- the shopper set since win; its voucher left out with `drop_voucher`: one
-- that has no use left), unless another checkout took the cart since or it is
-- gone: 1 when given back.
local function give_back_cart(cart_key, taken_key, checkout, ttl, drop_voucher)
  if redis.call('HGET', taken_key, '@checkout') ~= checkout then return 0 end
  local lines = taken_lines(taken_key)
  for i = 1, #lines, 2 do
    if not (drop_voucher and lines[i] == VOUCHER_FIELD) then redis.call('HSETNX', cart_key, lines[i], lines[i + 1]) end
  end
  redis.call('DEL', taken_key)
  redis.call('EXPIRE', cart_key, ttl)
  return 1
end

-- merge_lines(cart_key, lines, most, room): a guest cart's flat list into a
-- shopper's cart: a SKU in both keeps the larger quantity (capped at `most`); a
-- new SKU joins while the cart has fewer than `room` lines; the guest's voucher
-- and shipping method, the ones the shopper chose last, replace the cart's.
-- Twice the same list changes nothing more. Returns the lines merged and
-- whether the voucher or shipping changed.
local function merge_lines(cart_key, lines, most, room)
  local merged, changed = 0, false
  for i = 1, #lines, 2 do
    local sku = lines[i]
    if sku == VOUCHER_FIELD or sku == SHIPPING_FIELD then
      redis.call('HSET', cart_key, sku, lines[i + 1])
      changed = true
    else
      local quantity = math.min(tonumber(lines[i + 1]), most)
      local mine = redis.call('HGET', cart_key, sku)
      if mine then
        redis.call('HSET', cart_key, sku, math.max(tonumber(mine), quantity))
        merged = merged + 1
      elseif line_count(cart_key) < room then
        redis.call('HSET', cart_key, sku, quantity)
        merged = merged + 1
      end
    end
  end
  return merged, changed
end

-- set_voucher(cart_key, code, ttl, field): the cart's voucher (or with `field`,
-- that one of its settings: SHIPPING_FIELD) set, an empty value removes it, the
-- TTL refreshed; {0, the cart as a flat list}.
local function set_voucher(cart_key, code, ttl, field)
  field = field or VOUCHER_FIELD
  if code == '' then
    redis.call('HDEL', cart_key, field)
  else
    redis.call('HSET', cart_key, field, code)
  end
  redis.call('EXPIRE', cart_key, ttl)
  return {0, cart_lines(cart_key)}
end
