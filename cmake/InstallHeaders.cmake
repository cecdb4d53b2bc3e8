# Installs ember's public headers under <prefix>/include/ember/ with their includes of each other
# rewritten from "core/tensor/tensor.h" to "ember/core/tensor/tensor.h": an installed project then puts only
# <prefix>/include on its include path and writes <ember/...>, and no folder of its own (a
# project's own core/ or data/) can shadow one of ember's. Run at install time:
#   cmake -DSOURCE=<ember's tree> -DGENERATED=<build>/generated -DDESTINATION=<prefix>/include
#         -P InstallHeaders.cmake
set(folders base core kernels layers optim data distributed train)
set(headers ember.h extension.h extension_cuda.cuh extension_version.h)
foreach(folder ${folders})
  file(GLOB found RELATIVE ${SOURCE} ${SOURCE}/${folder}/*.h ${SOURCE}/${folder}/*/*.h)
  list(APPEND headers ${found})
endforeach()
# The device side of the extension API: the launch helper and the launch-shape helpers.
list(APPEND headers kernels/cuda/launch.cuh kernels/cuda/grid.cuh)

string(REPLACE ";" "|" alternatives "${folders}")
function(install_rewritten from to)
  file(READ ${from} text)
  string(REGEX REPLACE "#include \"((${alternatives})/[^\"]+)\"" "#include \"ember/\\1\"" text "${text}")
  string(REGEX REPLACE "#include \"(ember|extension|extension_version)\\.h\"" "#include \"ember/\\1.h\"" text "${text}")
  file(WRITE ${to} "${text}")
  message(STATUS "Installing: ${to}")
endfunction()

foreach(header ${headers})
  install_rewritten(${SOURCE}/${header} ${DESTINATION}/ember/${header})
endforeach()
install_rewritten(${GENERATED}/base/config.h ${DESTINATION}/ember/base/config.h)
