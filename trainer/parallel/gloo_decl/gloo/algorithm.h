// Declarations for ProcessGroupGloo.hpp only; see ../README.md. Nothing is needed from here.
#pragma once
