// The reader conformance suite (qsession/projection/reader_conformance.hpp).
// Produces with the product's own producer and admin client; asks only the
// reader under test.
#include "qsession/projection/reader_conformance.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <future>
#include <thread>

#include "kafka/admin.hpp"
#include "kafka/producer.hpp"
#include "messages/types.hpp"

namespace qsp::conformance {

std::ostream& operator<<(std::ostream& out, outcome x) {
  return out << (x == outcome::passed ? "passed" : x == outcome::skipped ? "skipped" : "FAILED");
}

std::ostream& operator<<(std::ostream& out, const check_result& x) {
  return out << "[" << x.result << "] " << x.name << ": " << x.detail;
}

namespace {

using clock_type = std::chrono::steady_clock;

/// A check's failure: thrown inside a check, caught by run().
struct failed {
  std::string what;
};

struct skipped {
  std::string why;
};

void expect(bool ok, const std::string& what) {
  if (!ok)
    throw failed{what};
}

std::string text_of(const caf::error& e) {
  return e ? describe(e) : std::string{"no error"};
}

/// What a reader delivered from one partition until `until` (passed or an
/// offset at or beyond it), or the timeout.
struct delivery {
  std::vector<log_record> records;
  int64_t passed = -1;
  caf::error error;
};

delivery read_until(partition_reader& r, int64_t until, std::chrono::milliseconds timeout) {
  delivery d;
  auto deadline = clock_type::now() + timeout;
  while (clock_type::now() < deadline) {
    auto ok = r.poll(500, d.records, d.passed);
    if (!ok) {
      d.error = ok.error();
      return d;
    }
    if (d.passed >= until || (!d.records.empty() && d.records.back().offset + 1 >= until))
      return d;
    std::this_thread::sleep_for(std::chrono::milliseconds(10)); // a poll loop's pace, not a sync
  }
  return d;
}

std::string offsets_text(const std::vector<log_record>& rs) {
  std::string out;
  for (auto& r : rs)
    out += (out.empty() ? "" : ",") + std::to_string(r.offset);
  return "[" + out + "]";
}

/// Offsets strictly increase, every epoch is present and never decreases.
void expect_ordered_with_epochs(const std::vector<log_record>& rs) {
  for (size_t i = 0; i < rs.size(); ++i) {
    expect(rs[i].leader_epoch >= 0,
           "offset " + std::to_string(rs[i].offset) + " delivered without a leader epoch");
    if (i > 0) {
      expect(rs[i].offset > rs[i - 1].offset, "offset " + std::to_string(rs[i].offset)
                                                + " delivered after " + std::to_string(rs[i - 1].offset));
      expect(rs[i].leader_epoch >= rs[i - 1].leader_epoch,
             "leader epoch decreased at offset " + std::to_string(rs[i].offset));
    }
  }
}

class suite {
public:
  suite(reader_factory make, broker b) : make_(std::move(make)), b_(std::move(b)) {
    cs_.bootstrap_servers = b_.bootstrap_servers;
    cs_.properties = b_.properties;
    cs_.client_id = "qsp-conformance";
    cs_.timeout_ms = static_cast<int>(b_.timeout.count());
    auto a = kafka::admin::make(cs_);
    if (!a)
      throw failed{"the suite's admin client: " + text_of(a.error())};
    admin_ = std::move(*a);
  }

  std::vector<check_result> run(const std::string& only) {
    std::vector<std::pair<std::string, void (suite::*)(const std::string&)>> checks{
      {"range_refused_below_low", &suite::range_below_low},
      {"range_refused_above_high", &suite::range_above_high},
      {"range_edges_accepted", &suite::range_edges},
      {"markers_and_aborted_skipped", &suite::committed_only},
      {"open_transaction_pins_high", &suite::open_transaction},
      {"epochs_after_leader_change", &suite::epochs},
      {"truncation_below_a_stored_epoch_refused", &suite::truncation},
      {"add_and_remove_while_running", &suite::add_remove},
      {"errors_named", &suite::errors_named},
      {"prompt_shutdown", &suite::prompt_shutdown},
    };
    std::vector<check_result> out;
    for (auto& [name, fn] : checks) {
      if (!only.empty() && name.find(only) == std::string::npos)
        continue;
      check_result r{name, outcome::passed, {}};
      auto topic = b_.topic_prefix + "-" + name + "-"
                   + std::to_string(clock_type::now().time_since_epoch().count() % 1000000007);
      try {
        (this->*fn)(topic);
        r.detail = detail_.empty() ? "ok" : detail_;
      } catch (const failed& f) {
        r.result = outcome::failed;
        r.detail = f.what;
      } catch (const skipped& s) {
        r.result = outcome::skipped;
        r.detail = s.why;
      }
      detail_.clear();
      admin_->delete_topic(topic); // best effort (a check may not have made it)
      out.push_back(std::move(r));
    }
    return out;
  }

private:
  void create(const std::string& topic, int partitions) {
    auto ok = admin_->create_topic(topic, partitions, {}, b_.replication_factor);
    if (!ok)
      throw failed{"creating " + topic + ": " + text_of(ok.error())};
    // Until the broker answers for it.
    auto deadline = clock_type::now() + b_.timeout;
    while (clock_type::now() < deadline) {
      auto st = admin_->inspect(topic);
      if (st && st->partition_count == partitions)
        return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    throw failed{"topic " + topic + " not visible within the timeout"};
  }

  void produce(const std::string& topic, int32_t p, int n, const std::string& tag = "r") {
    auto prod = kafka::producer::make(cs_);
    if (!prod)
      throw failed{"producer: " + text_of(prod.error())};
    for (int i = 0; i < n; ++i)
      if (!prod->send(topic, p, tag + std::to_string(i)))
        throw failed{"produce to " + topic};
    if (!prod->flush())
      throw failed{"flush to " + topic};
  }

  /// The broker's read_committed [low, high] of partition `p`.
  std::pair<int64_t, int64_t> marks(const std::string& topic, int32_t p) {
    auto st = admin_->inspect(topic);
    if (!st)
      throw failed{"watermarks of " + topic + ": " + text_of(st.error())};
    return {st->marks.at(static_cast<size_t>(p)).low, st->marks.at(static_cast<size_t>(p)).high};
  }

  std::shared_ptr<dispatch_log> reader_of(const std::string& topic,
                                          const std::string& servers = {}) {
    auto r = make_(topic, servers.empty() ? b_.bootstrap_servers : servers);
    if (!r)
      throw failed{"the reader factory: " + text_of(r.error())};
    expect(*r != nullptr, "the reader factory made no reader");
    return *r;
  }

  void expect_refused_naming(const caf::expected<void>& r, int64_t low, int64_t high,
                             const std::string& case_text) {
    expect(!r, case_text + ": accepted");
    expect(code_of(r.error()) == ec::refused,
           case_text + ": not ec::refused but " + text_of(r.error()));
    auto t = text_of(r.error());
    expect(t.find(std::to_string(low)) != std::string::npos
             && t.find(std::to_string(high)) != std::string::npos,
           case_text + ": the error does not give the observed range [" + std::to_string(low)
             + ", " + std::to_string(high) + "]: " + t);
    detail_ = t;
  }

  // -- the checks ----------------------------------------------------------------

  void range_below_low(const std::string& topic) {
    create(topic, 1);
    produce(topic, 0, 10);
    auto del = admin_->delete_records(topic, 0, 4);
    expect(static_cast<bool>(del), "delete records below 4: " + (del ? "" : text_of(del.error())));
    auto [low, high] = marks(topic, 0);
    expect(low == 4 && high == 10, "broker range [" + std::to_string(low) + ", "
                                     + std::to_string(high) + "], wanted [4, 10]");
    auto log = reader_of(topic);
    expect_refused_naming(log->start({{0, 3}}, {}), low, high, "start 3 below low 4");
  }

  void range_above_high(const std::string& topic) {
    create(topic, 1);
    produce(topic, 0, 10);
    auto log = reader_of(topic);
    expect_refused_naming(log->start({{0, 11}}, {}), 0, 10, "start 11 above high 10");
  }

  void range_edges(const std::string& topic) {
    create(topic, 1);
    produce(topic, 0, 10);
    expect(static_cast<bool>(admin_->delete_records(topic, 0, 4)), "delete records below 4");
    auto log = reader_of(topic);
    auto at_low = log->start({{0, 4}}, {});
    expect(static_cast<bool>(at_low), "start at low 4 refused: " + (at_low ? "" : text_of(at_low.error())));
    auto r = log->reader(0);
    expect(r != nullptr, "no reader for an assigned partition");
    auto d = read_until(*r, 10, b_.timeout);
    expect(!d.error, "reading from low: " + text_of(d.error));
    expect(!d.records.empty() && d.records.front().offset == 4 && d.records.back().offset == 9
             && d.records.size() == 6,
           "from low 4 delivered " + offsets_text(d.records) + ", wanted 4..9");
    auto at_high = log->start({{0, 10}}, {});
    expect(static_cast<bool>(at_high),
           "start at high 10 refused: " + (at_high ? "" : text_of(at_high.error())));
    auto r2 = log->reader(0);
    auto d2 = read_until(*r2, 10, b_.timeout);
    expect(!d2.error && d2.records.empty() && d2.passed == 10,
           "at high 10: delivered " + offsets_text(d2.records) + ", passed "
             + std::to_string(d2.passed) + " (wanted nothing, passed 10)");
  }

  /// commit 3, abort 2, commit 2: 3 + marker + 2 aborted + marker + 2 + marker.
  void committed_only(const std::string& topic) {
    create(topic, 1);
    auto tx = kafka::producer::make(cs_, topic + "-tx");
    if (!tx)
      throw failed{"transactional producer: " + text_of(tx.error())};
    auto txn = [&](int n, bool commit, const std::string& tag) {
      expect(static_cast<bool>(tx->begin()), "begin transaction");
      for (int i = 0; i < n; ++i)
        expect(static_cast<bool>(tx->send(topic, 0, tag + std::to_string(i))), "produce");
      expect(static_cast<bool>(tx->flush()), "flush");
      expect(static_cast<bool>(commit ? tx->commit() : tx->abort()), "end transaction");
    };
    txn(3, true, "kept-a");
    txn(2, false, "aborted");
    txn(2, true, "kept-b");
    auto deadline = clock_type::now() + b_.timeout;
    while (marks(topic, 0).second != 10 && clock_type::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    expect(marks(topic, 0).second == 10, "the markers did not settle (LSO != 10)");
    auto log = reader_of(topic);
    expect(static_cast<bool>(log->start({{0, 0}}, {})), "start at 0");
    auto r = log->reader(0);
    auto d = read_until(*r, 10, b_.timeout);
    expect(!d.error, "reading: " + text_of(d.error));
    // Wanted: 0,1,2 (kept-a), 7,8 (kept-b); 3 is a marker, 4,5 aborted, 6 a marker, 9 a marker.
    std::vector<int64_t> got;
    for (auto& x : d.records)
      got.push_back(x.offset);
    expect(got == std::vector<int64_t>({0, 1, 2, 7, 8}),
           "delivered " + offsets_text(d.records) + ", wanted [0,1,2,7,8]");
    for (auto& x : d.records)
      expect(x.value.rfind("kept", 0) == 0, "offset " + std::to_string(x.offset)
                                               + " delivered an aborted value " + x.value);
    expect(d.passed == 10, "passed " + std::to_string(d.passed)
                             + ", wanted 10 (the end, past the last marker)");
    expect_ordered_with_epochs(d.records);
  }

  void open_transaction(const std::string& topic) {
    create(topic, 1);
    produce(topic, 0, 3);
    auto tx = kafka::producer::make(cs_, topic + "-tx");
    if (!tx)
      throw failed{"transactional producer: " + text_of(tx.error())};
    expect(static_cast<bool>(tx->begin()), "begin transaction");
    for (int i = 0; i < 2; ++i)
      expect(static_cast<bool>(tx->send(topic, 0, "open" + std::to_string(i))), "produce");
    expect(static_cast<bool>(tx->flush()), "flush");
    auto [low, high] = marks(topic, 0); // read_committed: the LSO, 3
    expect(high == 3, "the broker's last stable offset is " + std::to_string(high) + ", wanted 3");
    auto log = reader_of(topic);
    auto r = log->start({{0, 5}}, {});
    expect_refused_naming(r, low, high, "start 5 above the last stable offset 3 (high watermark 5)");
    auto ok = log->start({{0, 3}}, {});
    expect(static_cast<bool>(ok), "start at the LSO 3 refused: " + (ok ? "" : text_of(ok.error())));
    auto rd = log->reader(0);
    auto d = read_until(*rd, 3, b_.timeout);
    expect(d.records.empty(), "records of the open transaction delivered: " + offsets_text(d.records));
    tx->abort();
  }

  void epochs(const std::string& topic) {
    create(topic, 1);
    produce(topic, 0, 3, "before");
    bool moved = false;
    if (b_.change_leader) {
      if (auto err = b_.change_leader(topic))
        throw failed{"changing the leader: " + text_of(err)};
      moved = true;
      produce(topic, 0, 3, "after");
    }
    auto end = moved ? 6 : 3;
    auto log = reader_of(topic);
    expect(static_cast<bool>(log->start({{0, 0}}, {})), "start at 0");
    auto r = log->reader(0);
    auto d = read_until(*r, end, b_.timeout);
    expect(!d.error, "reading: " + text_of(d.error));
    expect(static_cast<int>(d.records.size()) == end,
           "delivered " + offsets_text(d.records) + ", wanted " + std::to_string(end) + " records");
    expect_ordered_with_epochs(d.records);
    if (!moved)
      throw skipped{"epochs present and non-decreasing (" + std::to_string(d.records.front().leader_epoch)
                    + "); no leader change (broker::change_leader not given)"};
    expect(d.records.back().leader_epoch > d.records.front().leader_epoch,
           "the leader changed but the epoch did not rise: "
             + std::to_string(d.records.front().leader_epoch) + " -> "
             + std::to_string(d.records.back().leader_epoch));
    detail_ = "epoch " + std::to_string(d.records.front().leader_epoch) + " -> "
              + std::to_string(d.records.back().leader_epoch) + " across the leader change";
  }

  /// KIP-320 on one broker, as a truncation is stated: records under epoch
  /// e0 end at offset 3; a start at 5 that claims epoch e0 for its position
  /// is not backed by the log (the broker's end offset for e0 is 3), so the
  /// reader must refuse it (from start() or from the first poll); the same
  /// start under the true epoch is accepted.
  void truncation(const std::string& topic) {
    if (!b_.change_leader)
      throw skipped{"needs broker::change_leader (a new leader epoch)"};
    create(topic, 1);
    produce(topic, 0, 3, "e0-");
    if (auto err = b_.change_leader(topic))
      throw failed{"changing the leader: " + text_of(err)};
    produce(topic, 0, 4, "e1-");
    // The epochs, as the reader reports them.
    auto probe = reader_of(topic);
    expect(static_cast<bool>(probe->start({{0, 0}}, {})), "start at 0");
    auto d = read_until(*probe->reader(0), 7, b_.timeout);
    expect(d.records.size() == 7, "delivered " + offsets_text(d.records) + ", wanted 0..6");
    auto e0 = d.records.front().leader_epoch;
    auto e1 = d.records.back().leader_epoch;
    expect(e1 > e0, "no new epoch after the leader change");
    // Claimed under e0 at 5: the log does not back it.
    auto log = reader_of(topic);
    auto started = log->start({{0, 5}}, {{0, e0}});
    caf::error refusal;
    if (!started) {
      refusal = started.error();
    } else {
      auto r = log->reader(0);
      auto got = read_until(*r, 7, b_.timeout);
      expect(static_cast<bool>(got.error),
             "a start at 5 under epoch " + std::to_string(e0) + ", which ended at 3, was read: "
               + offsets_text(got.records));
      expect(got.records.empty(), "records delivered before the truncation was reported: "
                                    + offsets_text(got.records));
      refusal = got.error;
    }
    expect(code_of(refusal) == ec::refused,
           "the truncation is not ec::refused but " + text_of(refusal));
    // Under the true epoch the same start is fine.
    auto good = reader_of(topic);
    auto ok = good->start({{0, 5}}, {{0, e1}});
    expect(static_cast<bool>(ok), "a start at 5 under its true epoch " + std::to_string(e1)
                                    + " refused: " + (ok ? "" : text_of(ok.error())));
    auto rest = read_until(*good->reader(0), 7, b_.timeout);
    expect(!rest.error && rest.records.size() == 2 && rest.records.front().offset == 5,
           "from 5 under the true epoch delivered " + offsets_text(rest.records) + " "
             + text_of(rest.error));
    detail_ = text_of(refusal);
  }

  void add_remove(const std::string& topic) {
    create(topic, 2);
    produce(topic, 0, 4, "p0-");
    produce(topic, 1, 4, "p1-");
    auto log = reader_of(topic);
    expect(static_cast<bool>(log->start({{0, 0}}, {})), "start partition 0 at 0");
    expect(log->reader(1) == nullptr, "a reader for partition 1, which is not assigned");
    auto r0 = log->reader(0);
    auto d0 = read_until(*r0, 4, b_.timeout);
    expect(d0.records.size() == 4, "partition 0 delivered " + offsets_text(d0.records));
    auto again = log->add({{0, 0}}, {});
    expect(!again, "adding partition 0, already assigned, was accepted");
    auto added = log->add({{1, 2}}, {});
    expect(static_cast<bool>(added), "add partition 1 at 2: " + (added ? "" : text_of(added.error())));
    auto r1 = log->reader(1);
    expect(r1 != nullptr, "no reader for the added partition 1");
    auto d1 = read_until(*r1, 4, b_.timeout);
    expect(d1.records.size() == 2 && d1.records.front().offset == 2,
           "partition 1 from 2 delivered " + offsets_text(d1.records));
    // Partition 0 keeps reading while 1 was added.
    produce(topic, 0, 2, "p0-late-");
    auto d0b = read_until(*r0, 6, b_.timeout);
    expect(d0b.records.size() == 2 && d0b.records.front().offset == 4,
           "partition 0 after the add delivered " + offsets_text(d0b.records));
    auto removed = log->remove({0});
    expect(static_cast<bool>(removed), "remove partition 0: " + (removed ? "" : text_of(removed.error())));
    expect(log->reader(0) == nullptr, "a reader for removed partition 0");
    produce(topic, 1, 2, "p1-late-");
    auto d1b = read_until(*r1, 6, b_.timeout);
    expect(d1b.records.size() == 2 && d1b.records.front().offset == 4,
           "partition 1 after the removal of 0 delivered " + offsets_text(d1b.records));
    auto back = log->add({{0, 6}}, {});
    expect(static_cast<bool>(back), "add partition 0 again at 6: " + (back ? "" : text_of(back.error())));
    produce(topic, 0, 1, "p0-back-");
    auto r0b = log->reader(0);
    auto d0c = read_until(*r0b, 7, b_.timeout);
    expect(d0c.records.size() == 1 && d0c.records.front().offset == 6,
           "partition 0 added again at 6 delivered " + offsets_text(d0c.records));
  }

  void errors_named(const std::string& topic) {
    // A topic that does not exist: an error of the port's codes, naming it.
    auto log = reader_of(topic);
    auto r = log->start({{0, 0}}, {});
    expect(!r, "start on a topic that does not exist was accepted");
    expect(code_of(r.error()).has_value(), "the error is not a qsp::ec: " + text_of(r.error()));
    expect(text_of(r.error()).find(topic) != std::string::npos,
           "the error does not name the topic: " + text_of(r.error()));
    // No broker at all: transient (the projection retries), naming the topic.
    auto gone = reader_of(topic, b_.unreachable_servers);
    auto u = gone->start({{0, 0}}, {});
    expect(!u, "start with no broker reachable was accepted");
    expect(code_of(u.error()) == ec::kafka_unavailable || code_of(u.error()) == ec::kafka_read,
           "no broker reachable: not transient (kafka_unavailable, kafka_read) but "
             + text_of(u.error()));
    expect(text_of(u.error()).find(topic) != std::string::npos,
           "the error does not name the topic: " + text_of(u.error()));
    detail_ = "missing topic: " + text_of(r.error()) + "; no broker: " + text_of(u.error());
  }

  void prompt_shutdown(const std::string& topic) {
    // A start that waits for a broker nobody runs, ended by interrupt() from
    // another thread: it must answer ec::shutting_down, not run into its
    // own timeout (kafka_unavailable).
    auto log = reader_of(topic, b_.unreachable_servers);
    auto call = std::async(std::launch::async, [&] { return log->start({{0, 0}}, {}); });
    // Half a second into its wait (it has none of its own to finish sooner).
    if (call.wait_for(std::chrono::milliseconds(500)) == std::future_status::ready) {
      auto r = call.get();
      throw failed{"start with no broker reachable returned within 500 ms, before any interrupt: "
                   + (r ? std::string{"accepted"} : text_of(r.error()))};
    }
    auto asked = clock_type::now();
    log->interrupt();
    auto result = call.get();
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - asked);
    expect(!result, "start with no broker reachable was accepted");
    expect(code_of(result.error()) == ec::shutting_down,
           "after interrupt(): " + text_of(result.error()) + " instead of ec::shutting_down");
    auto later = log->start({{0, 0}}, {});
    expect(!later && code_of(later.error()) == ec::shutting_down,
           "a start after interrupt() did not answer ec::shutting_down");
    detail_ = "start returned " + std::to_string(ms.count()) + " ms after interrupt()";
  }

  reader_factory make_;
  broker b_;
  kafka::client_settings cs_;
  std::unique_ptr<kafka::admin> admin_;
  std::string detail_;
};

} // namespace

std::vector<check_result> run(const reader_factory& make, const broker& b,
                              const std::string& only) {
  try {
    suite s{make, b};
    return s.run(only);
  } catch (const failed& f) {
    return {check_result{"setup", outcome::failed, f.what}};
  }
}

} // namespace qsp::conformance
