-- stale(generation_key, generation): true when Redis holds another hot-cache
-- generation than the one the caller's caches were filled under (core/hotcache.py).
local function stale(generation_key, generation)
  return (redis.call('GET', generation_key) or '0') ~= generation
end
