#pragma once
// What the stage (ii) tests share: a recipe's entry by GEMM label.
#include <stdexcept>
#include <string>

#include "plan/recipe.h"

namespace pgq::testing {

// The entry of GEMM `label`; throws when the recipe has none (the test fails naming it).
inline const RecipeEntry& entry(const Recipe& r, const std::string& label) {
  for (const RecipeEntry& e : r.entries)
    if (e.label == label) return e;
  throw std::runtime_error("no entry " + label);
}

}  // namespace pgq::testing
