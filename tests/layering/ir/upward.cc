// Fixture for the layering test: ir/ may not include plan/, a layer above it.
#include "ir/graph.h"
#include "support/errors.h"
#include "plan/recipe.h"
