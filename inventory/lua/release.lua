-- KEYS: (remaining, bought) per SKU. ARGV: customer, quantity per SKU.
for i = 1, #KEYS / 2 do
  give_back(ARGV[1], KEYS[2*i-1], KEYS[2*i], tonumber(ARGV[i+1]))
end
return 1
