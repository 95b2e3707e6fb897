-- The gate's public Lua function, shared with checkout's one-call admission.
-- admit(customer, lines, refusals_key): `lines` holds {sku, quantity, limit (0:
-- none), remaining key, bought key} per gated line; all pass or nothing is
-- taken. Returns a verdict (admitted, sold_out, limit_reached, missing) and the SKU.
-- A refusal counts in the refusals hash under the SKU (all of them) and, for
-- the per-customer limit, under "SKU|limit_reached" too.
local function admit(customer, lines, refusals)
  for _, line in ipairs(lines) do
    local sku, quantity, limit, remaining, bought = unpack(line)
    local left = redis.call('GET', remaining)
    if not left then return 'missing', sku end
    if tonumber(left) < quantity then
      redis.call('HINCRBY', refusals, sku, 1)
      return 'sold_out', sku
    end
    if limit > 0 and tonumber(redis.call('HGET', bought, customer) or '0') + quantity > limit then
      redis.call('HINCRBY', refusals, sku, 1)
      redis.call('HINCRBY', refusals, sku .. '|limit_reached', 1)
      return 'limit_reached', sku
    end
  end
  for _, line in ipairs(lines) do
    redis.call('DECRBY', line[4], line[2])
    redis.call('HINCRBY', line[5], customer, line[2])
  end
  return 'admitted', ''
end
