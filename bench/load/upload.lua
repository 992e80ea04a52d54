-- wrk script: POST a photo as a raw image body to /v1/inscriptions and count
-- the answers by status code (printed at the end, summed over wrk's threads).
--   wrk -t2 -c8 -d30s -s bench/load/upload.lua 'http://127.0.0.1:8080/v1/inscriptions' -- photo.jpg
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  local path = args[1] or "tests/data/photos/rocket.jpg"
  local f = assert(io.open(path, "rb"))
  wrk.body = f:read("*a")
  f:close()
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "image/jpeg"
  statuses = {}
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    for code, n in pairs(t:get("statuses")) do
      total[code] = (total[code] or 0) + n
    end
  end
  local codes = {}
  for code in pairs(total) do table.insert(codes, code) end
  table.sort(codes)
  for _, code in ipairs(codes) do
    io.write(string.format("status %d: %d\n", code, total[code]))
  end
  io.write(string.format("p50 %.1f ms, p99 %.1f ms, max %.1f ms (all answers)\n",
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
end
