# The CUDA backend module, libkiln_cuda.so (-DKILN_CUDA=ON). libkiln and the CLI never link
# CUDA: the module is dlopened by the backend registry when a plan asks for "cuda", so the
# CPU-only build is unchanged. Its sources are kept out of libkiln's glob here.
option(KILN_CUDA "Build the CUDA backend module libkiln_cuda.so" OFF)
list(FILTER KILN_SOURCES EXCLUDE REGEX "/src/backend/cuda/")

if(KILN_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    # sm_90 machine code plus compute_90 PTX for newer GPUs.
    set(CMAKE_CUDA_ARCHITECTURES 90-real 90-virtual)
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit 13 REQUIRED)
  find_package(Threads REQUIRED)
  find_library(KILN_CUDNN_LIB cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
  find_path(KILN_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
  file(GLOB KILN_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.c
       ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cu)
  # core/tensor.c and the narrow float codecs it uses (core/narrow_dtype.c) are self-contained;
  # (errors, attributes and allocation come through the host table).
  add_library(kiln_cuda MODULE ${KILN_CUDA_SOURCES} ${CMAKE_SOURCE_DIR}/src/core/tensor.c
                             ${CMAKE_SOURCE_DIR}/src/core/narrow_dtype.c)
  set_target_properties(kiln_cuda PROPERTIES PREFIX "lib" OUTPUT_NAME kiln_cuda
                        C_VISIBILITY_PRESET hidden CUDA_VISIBILITY_PRESET hidden
                        CUDA_STANDARD 17 CUDA_RUNTIME_LIBRARY Static
                        LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib
                        BUILD_RPATH "${CUDAToolkit_LIBRARY_DIR}"
                        INSTALL_RPATH "${CUDAToolkit_LIBRARY_DIR}")
  target_include_directories(kiln_cuda PRIVATE ${CMAKE_SOURCE_DIR}/include ${CMAKE_SOURCE_DIR}/src
                                               ${KILN_CUDNN_INCLUDE})
  # The directory's warning flags are for the C compiler: give nvcc its host compiler's
  # equivalents instead.
  get_target_property(KILN_C_OPTIONS kiln_cuda COMPILE_OPTIONS)
  set_target_properties(kiln_cuda PROPERTIES COMPILE_OPTIONS
                        "$<$<COMPILE_LANGUAGE:C>:${KILN_C_OPTIONS}>")
  target_compile_options(kiln_cuda PRIVATE
                         $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Werror -Werror=all-warnings>)
  target_link_libraries(kiln_cuda PRIVATE CUDA::cudart_static CUDA::cublasLt ${KILN_CUDNN_LIB}
                                          Threads::Threads m ${CMAKE_DL_LIBS})
endif()
