-- KEYS: rate-limit window. ARGV: limit, window in ms. Returns ms to wait, 0 when allowed.
return limited(KEYS[1], ARGV[1], ARGV[2]) or 0
