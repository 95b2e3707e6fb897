-- limited(window_key, limit, window_ms): count one request in a fixed window;
-- the ms left in the window once over `limit`, else nil (limit 0: no limit).
local function limited(window_key, limit, window_ms)
  if tonumber(limit) <= 0 then return nil end
  local count = redis.call('INCR', window_key)
  if count == 1 then redis.call('PEXPIRE', window_key, window_ms) end
  if count > tonumber(limit) then return redis.call('PTTL', window_key) end
  return nil
end
