-- The gate's public Lua functions, shared with checkout's one-call admission
-- and its early refusal (orders/lua/admission.lua, orders/lua/refusal.lua).
-- `lines` holds {sku, quantity, limit (0: none), remaining key, bought key,
-- opens, closes (Unix ms; closes 0: no end)} per gated line.

-- now_ms(): Redis's own clock in milliseconds, the sale windows' clock: a sale
-- opens and closes on time with no process told at the edges.
local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

-- refused(customer, lines): the verdict admit() would give, taking and
-- counting nothing: not_started, ended, sold_out, limit_reached or missing
-- (the counter is gone) and the SKU; nil when every line passes.
local function refused(customer, lines)
  local now = now_ms()
  for _, line in ipairs(lines) do
    local sku, quantity, limit, remaining, bought, opens, closes = unpack(line)
    if now < opens then return 'not_started', sku end
    if closes > 0 and now >= closes then return 'ended', sku end
    local left = redis.call('GET', remaining)
    if not left then return 'missing', sku end
    if tonumber(left) < quantity then return 'sold_out', sku end
    if limit > 0 and tonumber(redis.call('HGET', bought, customer) or '0') + quantity > limit then
      return 'limit_reached', sku
    end
  end
  return nil
end

-- count_refusal(refusals_key, verdict, sku): a refusal counts in the refusals
-- hash under the SKU (all of them) and, for the per-customer limit, under
-- SKU .. LIMIT_REACHED_SUFFIX too (inventory/gate.py refusal_fields).
local function count_refusal(refusals, verdict, sku)
  redis.call('HINCRBY', refusals, sku, 1)
  if verdict == 'limit_reached' then redis.call('HINCRBY', refusals, sku .. LIMIT_REACHED_SUFFIX, 1) end
end

-- admit(customer, lines, refusals_key, edits_key): all lines pass or nothing is
-- taken. Returns a verdict (admitted or one of refused()'s) and the SKU; the
-- refusals hash counts a sale's sold-out and over-the-limit refusals. An
-- admission counts as an edit of the shopper's cart (its stripe in the edits
-- hash): the processes that remember refusing that cart stop answering from
-- memory (orders/services/admission.py, RefusalMemory), so that a retry of
-- this checkout finds its order.
local function admit(customer, lines, refusals, edits)
  local verdict, sku = refused(customer, lines)
  if verdict then
    if verdict == 'sold_out' or verdict == 'limit_reached' then count_refusal(refusals, verdict, sku) end
    return verdict, sku
  end
  for _, line in ipairs(lines) do
    redis.call('DECRBY', line[4], line[2])
    redis.call('HINCRBY', line[5], customer, line[2])
  end
  redis.call('HINCRBY', edits, tonumber(customer) % CART_EDIT_STRIPES, 1)
  return 'admitted', ''
end
