// A header with one mistake of each kind scripts/check_references.py looks for (the test
// references_check_catches), beside mentions it must accept. Never compiled.
#pragma once

// A path that does not exist: kernels/no_such_kernel.h.
// One that does, with a line after it: kernels/parallel.h:3.
// A note written nowhere (Note [no such note]), and one written in kernels/parallel.h whose
// name wraps across the comment's lines (Note [CPU
// threads]).
