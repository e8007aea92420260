// The allocation tests' one counter: their binary replaces the global operator new (and delete)
// with one that counts every call (counting_new.cc), so a test reads allocations() before and
// after the code under test. Only the alloc tests' own binary links it: nothing else in the
// suite runs under the replaced operators.
#pragma once

// The global operator new calls (every form) in this process so far.
long allocations();
