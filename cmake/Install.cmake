# What cmake --install writes besides the targets' own files, and the Debian packages.

# An Environment Modules / Lmod modulefile, PREFIX/modulefiles/ddprun/VERSION, naming the
# prefix given at install time (cmake --install build --prefix ~/.local/ddprun). It is its
# own component: the Debian packages install into /usr and leave it out.
configure_file(${CMAKE_CURRENT_LIST_DIR}/ddprun.modulefile.in
  ${CMAKE_BINARY_DIR}/ddprun.modulefile @ONLY)
install(CODE "
  file(READ \"${CMAKE_BINARY_DIR}/ddprun.modulefile\" text)
  string(REPLACE \"%DDPRUN_PREFIX%\" \"\${CMAKE_INSTALL_PREFIX}\" text \"\${text}\")
  file(WRITE \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/modulefiles/ddprun/${PROJECT_VERSION}\"
    \"\${text}\")
  message(STATUS \"Installing: \${CMAKE_INSTALL_PREFIX}/modulefiles/ddprun/${PROJECT_VERSION}\")"
  COMPONENT modulefile)

# Debian packages, from the build folder: cpack -G DEB (and RPMs for EL-family sites:
# cpack -G RPM, the same two packages). `ddprun` is the launcher alone
# (login nodes, containers: it depends on nothing of LibTorch); `ddprun-worker` is the
# worker library with its headers and CMake package, and ddp-train.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME ddprun)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_CONTACT "ddprun developers <ddprun@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # Depends from the binaries' libraries (dpkg-shlibdeps)
set(CPACK_DEBIAN_LAUNCHER_PACKAGE_NAME ddprun)
# eu-stack: the stacks of ranks that outlive the grace (without it, a one-line note instead).
set(CPACK_DEBIAN_LAUNCHER_PACKAGE_RECOMMENDS "elfutils")
set(CPACK_COMPONENT_LAUNCHER_DESCRIPTION
  "launcher for distributed (DDP) training jobs\n ddprun plans ranks from Slurm, Grid Engine, PBS, LSF, MPI or a hostfile, starts one worker\n per device on every node with torchrun's environment, and supervises them.")
set(CPACK_COMPONENTS_ALL launcher)
# RPM: the same components and names. rpmbuild's dependency generator gives Requires from
# the binaries' libraries (as dpkg-shlibdeps does for the .deb).
set(CPACK_RPM_COMPONENT_INSTALL ON)
set(CPACK_RPM_FILE_NAME RPM-DEFAULT)
set(CPACK_RPM_PACKAGE_GROUP "Applications/System")
set(CPACK_RPM_LAUNCHER_PACKAGE_NAME ddprun)
set(CPACK_RPM_PACKAGE_AUTOREQ ON)
set(CPACK_RPM_LAUNCHER_PACKAGE_SUGGESTS "elfutils")
set(CPACK_RPM_SPEC_MORE_DEFINE "%define _build_id_links none")
set(CPACK_PACKAGE_VENDOR "ddprun developers")
# The folders every system already owns stay out of the packages' file lists.
set(CPACK_RPM_EXCLUDE_FROM_AUTO_FILELIST_ADDITION
  /usr/share/man /usr/share/man/man1 /usr/share/bash-completion
  /usr/share/bash-completion/completions /usr/lib/cmake /usr/include)
if(DDPRUN_BUILD_WORKER)
  set(CPACK_DEBIAN_WORKER_PACKAGE_NAME ddprun-worker)
  set(CPACK_DEBIAN_WORKER_PACKAGE_DEPENDS "ddprun (= ${PROJECT_VERSION})")
  set(CPACK_DEBIAN_WORKER_PACKAGE_RECOMMENDS "libtorch-dev, libgloo-dev")
  set(CPACK_RPM_WORKER_PACKAGE_NAME ddprun-worker)
  set(CPACK_RPM_WORKER_PACKAGE_REQUIRES "ddprun = ${PROJECT_VERSION}")
  set(CPACK_COMPONENT_WORKER_DESCRIPTION
    "C++ DDP worker library over LibTorch's c10d, and ddp-train\n The library (communicator, DDP, sampler, checkpoints) with its headers and CMake package,\n and the ddp-train program that trains models from JSON configs.")
  list(APPEND CPACK_COMPONENTS_ALL worker)
endif()
include(CPack)
