// The PYTFCOMM_* registry (common/param.h): every default passes its own
// check, bad values are kConfig errors that name the variable, the value and
// what is allowed, and `info` spells values as it always did.
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>
#include <string>

#include "common/error.h"
#include "common/param.h"

namespace pytfcomm {
namespace {

// Sets one variable for the life of a test (each test runs in its own process).
class Env {
 public:
  Env(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~Env() { unsetenv(name_); }

 private:
  const char* name_;
};

// The message of the kConfig error read_param(id) throws ("" if none).
std::string config_error(ParamId id) {
  try {
    read_param(id);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(Params, EveryDefaultIsValidAndEveryRowComplete) {
  for (const ParamInfo& p : param_table()) unsetenv(p.env.c_str());
  std::set<std::string> seen;
  for (const ParamInfo& p : param_table()) {
    EXPECT_TRUE(seen.insert(p.env).second) << p.env;
    EXPECT_EQ(p.env.rfind("PYTFCOMM_", 0), 0u) << p.env;
    EXPECT_EQ(p.error, "") << p.env;
    EXPECT_EQ(p.value, p.fallback) << p.env;
    EXPECT_FALSE(p.doc.empty() || p.range.empty() || p.name.empty()) << p.env;
    EXPECT_TRUE(p.read == "init" || p.read == "first use") << p.env;
  }
  EXPECT_EQ(describe_params().size(), seen.size());
}

TEST(Params, OutOfRangeNamesVariableValueRangeAndDefault) {
  Env e("PYTFCOMM_SEGMENT_BYTES", "100");
  std::string msg = config_error(ParamId::segment_bytes);
  EXPECT_TRUE(contains(msg, "PYTFCOMM_SEGMENT_BYTES='100' is not valid")) << msg;
  EXPECT_TRUE(contains(msg, "bytes in [4096, 2^30]")) << msg;
  EXPECT_TRUE(contains(msg, "default 262144")) << msg;
}

TEST(Params, ValuesOnceIgnoredAreErrorsNow) {
  Env threads("PYTFCOMM_LOCAL_THREADS", "lots");
  Env chunk("PYTFCOMM_LOCAL_CHUNK_BYTES", "1");
  Env isa("PYTFCOMM_REDUCE_ISA", "avx512");
  EXPECT_TRUE(contains(config_error(ParamId::local_threads), "PYTFCOMM_LOCAL_THREADS='lots'"));
  EXPECT_TRUE(contains(config_error(ParamId::local_chunk_bytes), "[4096, 2^26]"));
  EXPECT_TRUE(contains(config_error(ParamId::reduce_isa), "expected auto or generic"));
}

TEST(Params, WordsAndSpecialValues) {
  {
    Env e("PYTFCOMM_TCP_STREAMS", "auto");
    EXPECT_EQ(read_param(ParamId::tcp_streams).integer, 0);
  }
  {
    Env e("PYTFCOMM_TCP_STREAMS", "17");
    EXPECT_TRUE(contains(config_error(ParamId::tcp_streams), "[1, 16] or auto"));
  }
  {
    // auto is 0 inside, but 0 connections is no setting a user means: an error.
    Env e("PYTFCOMM_TCP_STREAMS", "0");
    EXPECT_TRUE(contains(config_error(ParamId::tcp_streams), "[1, 16] or auto"));
  }
  {
    Env e("PYTFCOMM_LOCAL_THREADS", "0");
    EXPECT_TRUE(contains(config_error(ParamId::local_threads), "[1, 256] or auto"));
  }
  {
    Env e("PYTFCOMM_PEER_TIMEOUT", "0");  // off, although below the minimum
    EXPECT_EQ(read_param(ParamId::peer_timeout_s).real, 0.0);
  }
  {
    Env e("PYTFCOMM_PEER_TIMEOUT", "0.1");
    EXPECT_TRUE(contains(config_error(ParamId::peer_timeout_s), "[0.2, 1e+07] or off"));
  }
  {
    Env e("PYTFCOMM_SPIN_US", "-1");
    EXPECT_EQ(read_param(ParamId::spin_us).integer, -1);
  }
  {
    Env e("PYTFCOMM_SHM_RING_BYTES", "5000");
    EXPECT_TRUE(contains(config_error(ParamId::shm_ring_bytes), "a power of two"));
  }
  {
    Env e("PYTFCOMM_GPU_VERIFY", "2");
    EXPECT_TRUE(contains(config_error(ParamId::gpu_verify), "expected 0 or 1"));
  }
}

TEST(Params, FlagsAreSetByPresenceAlone) {
  EXPECT_FALSE(read_param(ParamId::no_yield).flag);
  Env e("PYTFCOMM_NO_YIELD", "0");
  EXPECT_TRUE(read_param(ParamId::no_yield).flag);
}

TEST(Params, ReloadChecksFirstUseVariablesTooAndKeepsThePreviousValues) {
  const Params& before = params();
  {
    Env e("PYTFCOMM_GPU_STAGE_BYTES", "1");
    EXPECT_THROW(reload_params(), Error);
  }
  EXPECT_EQ(&params(), &before);
  Env e("PYTFCOMM_TIMEOUT", "7");
  reload_params();
  EXPECT_EQ(params().timeout_s, 7.0);
}

TEST(Params, InfoSpellsValuesAsBefore) {
  Env timeout("PYTFCOMM_TIMEOUT", "7");
  Env segment("PYTFCOMM_SEGMENT_BYTES", "8192");  // test_communicator.cc sets its own at start
  reload_params();
  std::set<std::string> shown;
  for (const auto& [name, value] : describe_params()) shown.insert(name + "=" + value);
  for (const char* s :
       {"PYTFCOMM_TIMEOUT=7 s", "PYTFCOMM_SPIN_US=auto", "PYTFCOMM_TCP_STREAMS=auto",
        "PYTFCOMM_TIMELINE=off", "PYTFCOMM_FUSION_CYCLE_MS=1 ms", "PYTFCOMM_SEGMENT_BYTES=8192",
        "PYTFCOMM_PEER_TIMEOUT=10 s"}) {
    EXPECT_EQ(shown.count(s), 1u) << s;
  }
}

}  // namespace
}  // namespace pytfcomm
