# One target that carries the project's warning and sanitizer flags; every target links it.
add_library(ddprun_warnings INTERFACE)
target_compile_options(ddprun_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wold-style-cast
  -Wnon-virtual-dtor -Woverloaded-virtual -Wdouble-promotion
  -Wformat=2 -Wimplicit-fallthrough)
if(DDPRUN_WERROR)
  target_compile_options(ddprun_warnings INTERFACE -Werror)
endif()
if(DDPRUN_SANITIZE)
  target_compile_options(ddprun_warnings INTERFACE
    -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  target_link_options(ddprun_warnings INTERFACE -fsanitize=address,undefined)
endif()
