// RedisJobStore: the JobStore every replica shares (`danqing serve --redis URL`),
// on a real Redis server (7.0+) through hiredis.
//
// Keys, all under the namespace (default "danqing"):
//   <ns>:jobs           Stream of waiting and claimed jobs (field `id`), consumer
//                       group `workers`; an entry is acknowledged and deleted
//                       when its job finishes
//   <ns>:job:<id>       Hash: state, ticket, client, reason, sid (stream entry)
//   <ns>:in:<id>        the request (EncodeJobRequest), until the job finishes
//   <ns>:out:<id>       the result (EncodeStoredInscription), PX = TTL
//   <ns>:seq:enq / :seq:claimed   tickets handed out / jobs taken out of line
//   <ns>:client:<hex>   unfinished jobs of one client
//   <ns>:recent         the newest finished ids; <ns>:finished (zset) finish times
//   <ns>:events         PUBLISH channel: an id whose job was claimed or finished
//                       (Watch: one subscriber connection per store)
//   <ns>:replicas       zset: each claim loop's last beat (ActiveReplicas)
//   <ns>:verse:recent   list: the poem ids chosen last, newest first, at most
//                       the selectors' no-repeat window (NewRedisRecentChoices)
// Admission, claim and finish are each one Lua script, so concurrent
// replicas see them whole. Ids are validated (32 hex) and client keys are
// hex-encoded before they reach a key: nothing from a request names a key.
//
// Durability: an accepted job is in Redis before Enqueue returns; with
// `appendfsync always` (deploy/, the tests) it survives a Redis restart.
//
// Round trips: enqueue 1, claim 2 (XREADGROUP, the claim script; the
// heartbeat and the dead-worker check at most every 500 ms / half the claim
// timeout), finish 1, status 1.
//
// Thread-safety: every method may be called from any thread; each call takes a
// connection from a small pool (a blocking Claim holds one for its wait).
#pragma once

#include <memory>
#include <string>

#include "service/job_store.h"
#include "verse/recent_choices.h"

namespace danqing::service {

struct RedisEndpoint {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string password;  // AUTH when not empty
  int db = 0;
};

// redis://[:password@]host[:port][/db], also host:port. INVALID_ARGUMENT
// naming what is wrong.
Result<RedisEndpoint> ParseRedisUrl(const std::string& url);

// Connects lazily: a store whose server is down is made, and its calls
// answer UNAVAILABLE with the reason until the server answers.
std::unique_ptr<JobStore> NewRedisJobStore(RedisEndpoint endpoint, JobStoreOptions options,
                                           std::string ns = "danqing", std::string consumer = "");

// The verse selectors' no-repeat window shared by every replica, on the
// connections and under the namespace of `store`, a NewRedisJobStore (null
// for any other store). Each choice is two round trips: the window read
// (LRANGE), then the first of the candidates no other replica chose
// meanwhile recorded (one script: LRANGE, LPUSH, LTRIM). UNAVAILABLE while the server is away:
// VerseSelector then chooses on its local window.
std::shared_ptr<verse::RecentChoices> NewRedisRecentChoices(std::shared_ptr<JobStore> store);

}  // namespace danqing::service
