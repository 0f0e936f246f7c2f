#pragma once
// The flags that say which formats stage (i) profiles, the same in `pgq train` and
// `pgq import --profile-out`: --profile-outputs, --profile-metrics, --profile-bits,
// --profile-granularity, --profile-formats.
// Each is parsed as it is read (plan/profile_request.h) and refused naming the flag;
// `pgq experiment --granularity` is parsed as --profile-granularity is.
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "plan/profile_request.h"

namespace pgq::cli {

// The scale granularity `text` of `flag`: tensor, channel or block<N>. Throws
// pgq::Error naming the flag for anything else.
ScaleLayout parseGranularity(std::string_view flag, const std::string& text);

// `when` starts each help line ("Also profile", "With --profile-out: also profile").
void addProfileFormatFlags(CLI::App* cmd, ProfileAsk& ask, const std::string& when);

// The first stage (i) flag `cmd` was given (--profile-formats, -metrics, -outputs, -bits,
// -granularity, -amax-history, -warmup), or nullptr: for TrainOptions::profile_flag_given.
const char* givenProfileFlag(const CLI::App* cmd);

}  // namespace pgq::cli
