-- Replay markers of written orders, in one call: a replay of such a checkout
-- passes the gate without taking units.
-- KEYS: per order: its replay marker. ARGV: marker TTL, then per order: its id.
for i = 1, #KEYS do
  redis.call('SET', KEYS[i], ARGV[i + 1], 'EX', ARGV[1])
end
return #KEYS
