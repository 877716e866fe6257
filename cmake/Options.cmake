# Warnings and sanitizers applied to symcomm's own targets through this interface library.
add_library(symcomm_options INTERFACE)
target_compile_options(symcomm_options INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
if(SYMCOMM_SANITIZE)
  target_compile_options(symcomm_options INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=${SYMCOMM_SANITIZE} -fno-omit-frame-pointer>)
  target_link_options(symcomm_options INTERFACE -fsanitize=${SYMCOMM_SANITIZE})
endif()
