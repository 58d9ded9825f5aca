# The course (tools/course.sh): each exercise is graded by the engine's own tests, run with
# doctest's filters. `ctest -L course` runs them all, `ctest -L course.03` one exercise.
# In the mainline every one passes; in a student tree each fails until it is solved.
function(wedge_course_exercise number target)
  add_test(NAME course.${number} COMMAND ${target} ${ARGN})
  set_tests_properties(course.${number} PROPERTIES LABELS "course;course.${number}" TIMEOUT 300)
endfunction()

wedge_course_exercise(01 test_engine "--test-case=diamond*,a deeper diamond*,backward from a given gradient")
wedge_course_exercise(02 test_ops "--test-case=gradcheck: every differentiable op*" "--subcase=mul *")
wedge_course_exercise(03 test_kernels "--test-case=gradcheck layer norm*,ref layer norm*")
wedge_course_exercise(04 test_kernels "--test-case=gradcheck cross-entropy*,ref cross-entropy*")
wedge_course_exercise(05 test_kernels "--test-case=ref Plücker pairing*,Plücker vectors satisfy*")
wedge_course_exercise(06 test_kernels "--test-case=gradcheck Plücker pairing*")
wedge_course_exercise(07 test_ops "--test-case=gradcheck: every differentiable op*" "--subcase=matmul *")
wedge_course_exercise(08 test_ops "--test-case=gradcheck: every differentiable op*" "--subcase=softmax *,log_softmax *")
wedge_course_exercise(09 test_ops "--test-case=gradcheck: every differentiable op*" "--subcase=embedding *")
